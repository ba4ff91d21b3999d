"""The SwarmHub coordinator: a FastAPI app that keeps the books of every run. It never imports torch."""
