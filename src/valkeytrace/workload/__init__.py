"""The client side: benchmark clients (valkey-benchmark, redis-benchmark) and their parsers."""
