"""The capture format: one self-describing, versioned file per `record` run."""
