"""The durability pipeline as a discrete-event simulation (sim.py) of measured parts (params.py):
pure, no recording, no host. analysis/calibration.py fills it from a recording."""
