"""cluster/: real LocalClusters with worker processes on port 0, no mocks of dask.

GPU paths cannot run on the CPU CI machine: GPU detection is tested through the
environment and a stand-in nvidia-smi executable on PATH; LocalCUDACluster is not started.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from distributed import Client, LocalCluster
from distributed.core import Status
from distributed.security import Security

from cluster.build import (build_cluster, connect, dashboard_link, resolve_kind, slurm_job_script,
                           task_resources)
from cluster.cli import up
from cluster.config import ClusterConfig, ConfigError, SlurmConfig, TLSConfig
from cluster.gpu import detect_gpus, gpu_pin

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _pid():
    return os.getpid()


def _worker_info(client):
    return client.scheduler_info(n_workers=-1)["workers"]


# ---------------------------------------------------------------- local kind

def test_local_cluster_worker_processes_on_loopback():
    with connect(ClusterConfig(workers=2)) as client:
        cluster = client.cluster
        workers = _worker_info(client)
        assert len(workers) == 2
        assert all(w["nthreads"] == 1 for w in workers.values())
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert all(addr.startswith("tcp://127.0.0.1:") for addr in workers)
        dashboard = {s.getsockname()[0] for s in cluster.scheduler.http_server._sockets.values()}
        assert dashboard == {"127.0.0.1"}
        assert dashboard_link(client).startswith("http://127.0.0.1:")
        pids = set(client.run(_pid).values())
        assert len(pids) == 2 and os.getpid() not in pids       # real worker processes
        assert task_resources(ClusterConfig()) is None
    assert client.status == "closed"
    assert cluster.status == Status.closed                      # connect closed what it started


# ------------------------------------------------------ kind scheduler / file

@pytest.fixture
def running(tmp_path):
    """A cluster started elsewhere, with its scheduler file."""
    sf = tmp_path / "scheduler.json"
    with build_cluster(ClusterConfig(workers=1)) as cluster:
        with Client(cluster) as c:
            c.write_scheduler_file(str(sf))
        yield cluster, sf


def test_connect_to_existing_scheduler_by_address_and_file(running):
    cluster, sf = running
    by_address = ClusterConfig(kind="scheduler", address=cluster.scheduler_address)
    with connect(by_address) as client:
        assert client.submit(sum, [1, 2, 3]).result() == 6
        assert task_resources(by_address, client) is None        # CPU workers: no GPU resource
    with connect(ClusterConfig(kind="scheduler", scheduler_file=str(sf))) as client:
        assert client.scheduler.address == cluster.scheduler_address
    with connect(ClusterConfig(), address=cluster.scheduler_address) as client:   # --scheduler
        assert len(_worker_info(client)) == 1
    assert cluster.status == Status.running                     # not ours to close


# ------------------------------------------------------------------------ TLS

def _make_certs(d: Path) -> TLSConfig:
    """A throwaway CA and a cert it signs for 127.0.0.1, via the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    (d / "ext.cnf").write_text(textwrap.dedent("""\
        basicConstraints=CA:FALSE
        keyUsage=digitalSignature,keyEncipherment
        extendedKeyUsage=serverAuth,clientAuth
        subjectAltName=IP:127.0.0.1,DNS:localhost
        subjectKeyIdentifier=hash
        authorityKeyIdentifier=keyid
        """))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *a: subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True)
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=tdos-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", *ec, "-keyout", "key.pem", "-out", "cert.csr", "-subj", "/CN=127.0.0.1")
    run("x509", "-req", "-in", "cert.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "cert.pem", "-days", "2", "-extfile", "ext.cnf")
    return TLSConfig(ca_file=str(d / "ca.pem"), cert=str(d / "cert.pem"), key=str(d / "key.pem"))


def test_tls_scheduler_and_tls_local_cluster(tmp_path):
    tls = _make_certs(tmp_path)
    # the cluster object talks to its own scheduler as a client, hence the client pair too
    server_security = Security(tls_ca_file=tls.ca_file, require_encryption=True,
                               **{f"tls_{role}_{part}": getattr(tls, part)
                                  for role in ("scheduler", "worker", "client")
                                  for part in ("cert", "key")})
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, protocol="tls://",
                      security=server_security, host="127.0.0.1", scheduler_port=0,
                      dashboard_address=None) as server:
        assert server.scheduler_address.startswith("tls://127.0.0.1:")
        cfg = ClusterConfig(kind="scheduler", address=server.scheduler_address, tls=tls)
        with connect(cfg) as client:
            assert client.submit(pow, 2, 10).result() == 1024
        with pytest.raises(ConfigError, match=r"^cluster\.address: tls://.* has no ca_file"):
            ClusterConfig(kind="scheduler", address=server.scheduler_address)
    with connect(ClusterConfig(workers=1, tls=tls)) as client:   # `tdos cluster up --tls-*`
        assert client.scheduler.address.startswith("tls://127.0.0.1:")
        assert client.submit(abs, -3).result() == 3


# ---------------------------------------------------------------------- SLURM

def test_slurm_job_script_gpu_and_cpu():
    gpu = ClusterConfig(kind="slurm", slurm=SlurmConfig(
        queue="gpu", account="proj42", walltime="01:30:00", cores=8, memory="32GB", gpus=2,
        job_extra_directives=["--qos=high"]))
    script = slurm_job_script(gpu)
    for line in ("#SBATCH -p gpu", "#SBATCH -A proj42", "#SBATCH -t 01:30:00",
                 "#SBATCH --mem=30G", "#SBATCH --gres=gpu:2", "#SBATCH --qos=high",
                 "export TDOS_JOB_GPUS=2"):
        assert line in script.splitlines(), line
    assert "--nworkers 2" in script and "--resources GPU=1" in script
    assert "--preload cluster.pin_gpu" in script
    assert task_resources(gpu) == {"GPU": 1}

    cpu = slurm_job_script(ClusterConfig(kind="slurm", slurm=SlurmConfig(cores=4, memory="8GB")))
    assert "--gres" not in cpu and "GPU=1" not in cpu
    assert "--nworkers 4" in cpu and "--nthreads 1" in cpu       # one 1-thread worker per core


def test_slurm_cluster_scheduler_binds_host_and_dashboard():
    """dask-jobqueue refuses host/dashboard_address as direct arguments (kind slurm died at
    once); through scheduler_options they bind where the config says. No job is submitted
    here: tests/test_slurm.py runs real jobs."""
    from dask_jobqueue import SLURMCluster

    from cluster.slurm import scheduler_options, slurm_job_kwargs

    cfg = ClusterConfig(kind="slurm", host="127.0.0.1", slurm=SlurmConfig(cores=1, memory="1GB"))
    with SLURMCluster(scheduler_options=scheduler_options(cfg), **slurm_job_kwargs(cfg)) as c:
        assert c.scheduler_address.startswith("tcp://127.0.0.1:")
        sockets = {s.getsockname()[0] for s in c.scheduler.http_server._sockets.values()}
        assert sockets == {"127.0.0.1"} and c.dashboard_link.startswith("http://127.0.0.1:")
    assert "host" not in scheduler_options(ClusterConfig(kind="slurm"))   # every interface


def test_cluster_up_slurm_dry_run_prints_script(capsys):
    rc = up(["--kind", "slurm", "--dry-run", "--slurm-queue", "long", "--slurm-walltime",
             "12:00:00", "--slurm-memory", "64GB", "--slurm-gpus", "1"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert {"#SBATCH -p long", "#SBATCH -t 12:00:00", "#SBATCH --gres=gpu:1"} <= set(out)
    assert any(line.startswith("#SBATCH --mem=") for line in out)


# ------------------------------------------------------------ tdos cluster up

def test_cluster_up_subprocess_serves_until_sigint(tmp_path):
    sf = tmp_path / "scheduler.json"
    proc = subprocess.Popen([sys.executable, "-m", "cluster", "up", "--workers", "1",
                             "--scheduler-file", str(sf)], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Ctrl-C"):
                break
        text = "".join(lines)
        address = re.search(r"^scheduler: (tcp://127\.0\.0\.1:\d+)$", text, re.M).group(1)
        assert f"tdos sweep CONFIG.yaml --scheduler {address}" in text
        port = re.search(r"^dashboard: http://127\.0\.0\.1:(\d+)/status$", text, re.M).group(1)
        assert f"tdos page (once a sweep runs): http://127.0.0.1:{port}/tdos" in text
        with Client(address) as client:
            assert client.submit(max, 4, 9).result() == 9
        with Client(scheduler_file=str(sf)) as client:
            assert client.scheduler.address == address
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not sf.exists()                                      # no stale address left behind


def test_cluster_up_config_error_exits_2(capsys):
    assert up(["--workers", "0"]) == 2
    assert "cluster.workers: must be >= 1, got 0" in capsys.readouterr().err


# -------------------------------------------------------------- config errors

TLS_MISSING = {"ca_file": "/nonexistent/ca.pem", "cert": "/nonexistent/c.pem",
               "key": "/nonexistent/k.pem"}


@pytest.mark.parametrize("d, message", [
    ({"kind": "lokal"}, "cluster.kind: 'lokal' is not one of local, cuda, scheduler, slurm, auto; "
                        "did you mean 'local'?"),
    ({"wokers": 2}, "cluster.wokers: unknown field; did you mean 'workers'?"),
    ({"kind": "scheduler"}, "cluster.address: kind 'scheduler' needs address"),
    ({"kind": "scheduler", "scheduler_file": "/nonexistent.json"},
     "cluster.scheduler_file: file not found: /nonexistent.json"),
    ({"workers": 0}, "cluster.workers: must be >= 1, got 0"),
    ({"workers": "four"}, "cluster.workers: expected an integer >= 1 or null, got 'four'"),
    ({"threads_per_worker": True}, "cluster.threads_per_worker: expected an integer >= 1"),
    ({"memory_limit": "lots"}, "cluster.memory_limit: 'lots' is not a size"),
    ({"address": "http://h:1"}, "cluster.address: unknown protocol 'http'"),
    ({"address": "tls://10.0.0.1:8786"}, "cluster.address: tls://10.0.0.1:8786 is tls:// but "
                                         "cluster.tls has no ca_file/cert/key"),
    ({"tls": TLS_MISSING}, "cluster.tls.ca_file: file not found: /nonexistent/ca.pem"),
    ({"tls": {"ca_file": "/x.pem"}}, "cluster.tls.cert: TLS needs ca_file, cert and key together"),
    ({"tls": {"ca-file": "/x.pem"}}, "cluster.tls.ca-file: unknown field; did you mean 'ca_file'?"),
    ({"slurm": {"qeue": "gpu"}}, "cluster.slurm.qeue: unknown field; did you mean 'queue'?"),
    ({"slurm": {"walltime": "two hours"}}, "cluster.slurm.walltime: 'two hours' is not HH:MM:SS"),
    ({"slurm": {"memory": "lots"}}, "cluster.slurm.memory: 'lots' is not a size"),
    ({"slurm": {"jobs": 0}}, "cluster.slurm.jobs: must be >= 1, got 0"),
    ({"slurm": {"gpus": 4, "cores": 2}}, "cluster.slurm.cores: 2 cores cannot host 4 GPU workers"),
    ({"slurm": {"job_extra_directives": "--qos=high"}}, "cluster.slurm.job_extra_directives: "
                                                        "expected a list of strings"),
    ({"slurm": "big"}, "cluster.slurm: expected a mapping of fields"),
])
def test_config_errors_name_field_and_fix(d, message):
    with pytest.raises(ConfigError) as e:
        ClusterConfig.from_dict(d)
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_config_where_prefix_and_valid_round_trip():
    with pytest.raises(ConfigError, match=r"^sweep\.cluster\.workers: must be >= 1"):
        ClusterConfig.from_dict({"workers": -1}, where="sweep.cluster")
    cfg = ClusterConfig.from_dict({"kind": "slurm", "slurm": {"gpus": 1, "walltime": "1-00:00:00",
                                                              "job_extra_directives": ["--qos=x"]}})
    assert cfg.slurm.gpus == 1 and cfg.slurm.job_extra_directives == ("--qos=x",)
    assert ClusterConfig.from_dict(None) == ClusterConfig()
    assert cfg.replace(workers=3, host=None).workers == 3


def test_kinds_that_cannot_be_built_here():
    with pytest.raises(ConfigError, match=r"^cluster\.kind: 'scheduler' attaches"):
        build_cluster(ClusterConfig(kind="scheduler", address="tcp://127.0.0.1:1"))
    try:
        import dask_cuda  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"^cluster\.kind: 'cuda' needs dask-cuda.*tdos\[cuda\]"):
            build_cluster(ClusterConfig(kind="cuda"))


def test_default_import_pulls_neither_dask_cuda_nor_jobqueue():
    code = ("import sys, cluster.build, cluster.cli; "
            "print(sorted(m for m in ('dask_cuda', 'dask_jobqueue', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=ENV, check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == "[]"


# -------------------------------------------------------------- GPU detection

@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """PATH holding only a stand-in nvidia-smi that lists two GPUs; NVML made unimportable."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Fake (UUID: GPU-0)'\necho 'GPU 1: Fake (UUID: GPU-1)'\n")
    smi.chmod(0o755)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return bindir


def test_detect_gpus_without_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", str(tmp_path))                  # an empty directory
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert detect_gpus() == 0
    assert resolve_kind(ClusterConfig(kind="auto")) == "local"
    assert task_resources(ClusterConfig(kind="auto")) is None


def test_detect_gpus_reads_nvidia_smi_and_cuda_visible_devices(fake_smi, monkeypatch):
    assert detect_gpus() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert detect_gpus() == 1
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert detect_gpus() == 0
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    if importlib.util.find_spec("dask_cuda") is None:          # GPUs but no dask-cuda: local
        assert resolve_kind(ClusterConfig(kind="auto")) == "local"


def test_gpu_pin_gives_each_job_worker_its_own_device():
    assert [gpu_pin(f"job-7-{i}", "4,5", 2) for i in range(2)] == ["4", "5"]
    assert gpu_pin("job-7-1", None, 2) == "1"
    assert gpu_pin("job-7", "4", 1) is None
