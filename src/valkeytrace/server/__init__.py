"""The server side: launching or attaching to valkey-server, its threads and configuration."""
