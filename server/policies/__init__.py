"""Pure decisions of the coordinator: no I/O, plain data in and out, each tested on its own."""
