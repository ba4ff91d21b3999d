"""HTTP and websocket routes: thin, validating input and owning the transaction."""
