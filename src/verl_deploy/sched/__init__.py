"""Cluster schedulers: what `generate --scheduler` writes (submit.sbatch, rayjob.yaml) and their options."""
