"""Where a run executes: this host, a Docker container, a Ray cluster, a Slurm or KubeRay job.

One interface (protocol.py: `Backend`, a typed `Handle` from handle.py) and a registry (registry.py: kind ->
class). Each backend kind is a module (local, docker, rayjobs, slurm, kuberay); what they share is in
process.py (the detached process), host.py (this host, its container, the SSH nodes) and
scheduler_options.py (the options of Slurm and KubeRay). The files a scheduler submits are rendered by
slurm_script.py (submit.sbatch) and kuberay_manifest.py (rayjob.yaml); container_setup.py makes the
container the docker backend runs in.
"""
