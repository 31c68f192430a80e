"""verl-deploy: from a bare NPU/GPU host to a running, watched verl DAPO training."""

__version__ = "0.1.0"
