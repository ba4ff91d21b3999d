"""Database operations. Each takes a Session and only flushes: the caller owns the transaction."""
