"""Plan + scheduler options -> rayjob.yaml: a ConfigMap with run_training.sh and a KubeRay RayJob.

The RayJob (ray.io/v1) brings up a Ray cluster whose head and worker pods each hold one node's
devices (`nvidia.com/gpu` / `huawei.com/Ascend910` limits, registered in Ray as GPU / NPU), runs
run_training.sh from the ConfigMap as its entrypoint, and is torn down when the job ends.
`backoffLimit: 0`: a failed attempt is not rebuilt from scratch by KubeRay; verl-deploy re-creates
it with the next memory feature and resume. The SwanLab key comes from a Secret
(`secretKeyRef`), never from this file; so does the Ray token with --k8s-ray-auth secret:NAME, while
--k8s-ray-auth token asks KubeRay (>= 1.5.1, `authOptions`) to make one.
"""

from __future__ import annotations

import json
import shlex

import yaml

from verl_deploy import __version__
from verl_deploy.compiler import Plan
from verl_deploy.backends.scheduler_options import RAY_TOKEN_KEY, SchedulerOptions
from verl_deploy.backends.slurm_script import shared_dirs

SCRIPTS_MOUNT = "/verl-deploy"
SECRET_KEY = "api-key"
SCHEDULED_DEVICE_VARS = {"ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}  # the device plugin picks them


def container_env(plan: Plan, options: SchedulerOptions) -> list[dict]:
    from verl_deploy.render import swanlab_env

    env: list[dict] = [{"name": k, "value": str(v)} for k, v in plan.env if k not in SCHEDULED_DEVICE_VARS]
    env += [{"name": k, "value": str(v)} for k, v in swanlab_env(plan) if v is not None]
    if plan.spec.swanlab_on:
        env.append({"name": "SWANLAB_API_KEY", "valueFrom": {"secretKeyRef": {
            "name": options.swanlab_secret, "key": SECRET_KEY, "optional": True}}})
    return env + ray_token_env(options)


def ray_token_env(options: SchedulerOptions) -> list[dict]:
    """--k8s-ray-auth secret:NAME (operators before authOptions): every Ray process in token mode, the token
    from the Secret (never in this file). With `token`, KubeRay injects both itself."""
    secret = options.ray_token_secret
    if secret is None:
        return []
    return [{"name": "RAY_AUTH_MODE", "value": "token"},
            {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": RAY_TOKEN_KEY}}}]


def _submitter(plan: Plan, options: SchedulerOptions) -> dict:
    """The K8sJobMode submitter pod with the token (KubeRay gives it its `ray job submit` command)."""
    return {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "ray-job-submitter", "image": plan.spec.image, "env": ray_token_env(options),
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}}]}}


def _container(plan: Plan, options: SchedulerOptions, name: str, volumes: list[dict]) -> dict:
    spec = plan.spec
    count = len(spec.devices)
    resource = options.resource(spec.device)
    return {
        "name": name, "image": spec.image, "env": container_env(plan, options),
        "resources": {"limits": {resource: count}, "requests": {resource: count}},
        "volumeMounts": [{"name": v["name"], "mountPath": v["mountPath"], **({"readOnly": True} if v.get("readOnly") else {})}
                         for v in volumes]
                        + [{"name": "verl-deploy-scripts", "mountPath": SCRIPTS_MOUNT},
                           {"name": "dshm", "mountPath": "/dev/shm"}],
    }


def _volumes(plan: Plan, options: SchedulerOptions) -> list[dict]:
    """The user's PersistentVolumeClaims, else the host's directories (hostPath) at the same paths."""
    if options.volumes:
        return [{"name": f"data-{i}", "claim": v.claim, "mountPath": v.path, "readOnly": v.read_only}
                for i, v in enumerate(options.volumes)]
    return [{"name": f"data-{i}", "hostPath": d, "mountPath": d} for i, d in enumerate(shared_dirs(plan.spec))]


def _pod_volumes(volumes: list[dict], configmap: str) -> list[dict]:
    pod = [{"name": v["name"], "persistentVolumeClaim": {"claimName": v["claim"]}} if "claim" in v
           else {"name": v["name"], "hostPath": {"path": v["hostPath"], "type": "DirectoryOrCreate"}} for v in volumes]
    return pod + [{"name": "verl-deploy-scripts", "configMap": {"name": configmap, "defaultMode": 0o755}},
                  {"name": "dshm", "emptyDir": {"medium": "Memory"}}]


def ray_start_params(plan: Plan) -> dict[str, str]:
    count = len(plan.spec.devices)
    if plan.platform.ray_resource == "GPU":
        return {"num-gpus": str(count)}
    return {"resources": "'" + json.dumps({plan.platform.ray_resource: count}) + "'"}


def entrypoint(plan: Plan) -> str:
    sources = " ".join(shlex.quote(s) for s in plan.platform.set_env_scripts)
    run = f"bash {SCRIPTS_MOUNT}/run_training.sh"
    if not sources:
        return run
    inner = f'for f in {sources}; do if [ -f "$f" ]; then . "$f"; fi; done; {run}'
    return f"bash -c {shlex.quote(inner)}"


def build_documents(plan: Plan, options: SchedulerOptions, run_training: str, name: str = "verl-deploy") -> list[dict]:
    """[ConfigMap, RayJob] for this plan; `run_training` is the rendered run_training.sh."""
    spec = plan.spec
    configmap = f"{name}-scripts"
    volumes = _volumes(plan, options)
    pod_volumes = _pod_volumes(volumes, configmap)
    labels = {"app.kubernetes.io/managed-by": "verl-deploy"}
    metadata = {"name": name, "labels": labels, **({"namespace": options.namespace} if options.namespace else {})}
    head = {"rayStartParams": ray_start_params(plan),
            "template": {"spec": {"containers": [_container(plan, options, "ray-head", volumes)],
                                  "volumes": pod_volumes}}}
    cluster: dict = {"headGroupSpec": head}
    if options.k8s_ray_auth in ("token", "disabled"):
        cluster["authOptions"] = {"mode": options.k8s_ray_auth}  # KubeRay >= 1.5.1
    if spec.nnodes > 1:
        workers = spec.nnodes - 1
        cluster["workerGroupSpecs"] = [{
            "groupName": "workers", "replicas": workers, "minReplicas": workers, "maxReplicas": workers,
            "rayStartParams": ray_start_params(plan),
            "template": {"spec": {"containers": [_container(plan, options, "ray-worker", volumes)],
                                  "volumes": pod_volumes}}}]
    job_spec: dict = {"entrypoint": entrypoint(plan), "shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": 300,
                      "backoffLimit": 0, "submissionMode": "K8sJobMode", "rayClusterSpec": cluster}
    if options.ray_token_secret:
        job_spec["submitterPodTemplate"] = _submitter(plan, options)
    rayjob = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": metadata, "spec": job_spec}
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {**metadata, "name": configmap}, "data": {"run_training.sh": run_training}}
    return [config, rayjob]


def render_rayjob(plan: Plan, options: SchedulerOptions, run_training: str, name: str = "verl-deploy") -> str:
    from verl_deploy.render import summary

    header = (f"# rayjob.yaml: generated by verl-deploy {__version__} for verl {plan.spec.verl_version} "
              f"({summary(plan)}).\n# kubectl apply -f rayjob.yaml  (the SwanLab key: kubectl create secret generic "
              f"{options.swanlab_secret} --from-file={SECRET_KEY}=KEYFILE)\n")
    if options.ray_token_secret:
        header += (f"# the Ray token: kubectl create secret generic {options.ray_token_secret} "
                   f"--from-file={RAY_TOKEN_KEY}=TOKENFILE\n")
    return header + yaml.safe_dump_all(build_documents(plan, options, run_training, name), sort_keys=False,
                                       width=1000)
