"""scripts/setup.sh on a machine without apt: it names what is missing and stops."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_setup_names_missing_modules_without_apt(tmp_path):
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "HPCGNN_SETUP_NO_APT": "1",
           "HPCGNN_VENV": str(tmp_path / "venv"), "PARMETIS_DIR": str(tmp_path / "nowhere")}
    for tool in ("dirname", "id", "printf", "grep", "sed", "find", "head"):
        src = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        if src:
            os.symlink(src, tmp_path / tool)
    res = subprocess.run(["/bin/bash", os.path.join(ROOT, "scripts", "setup.sh")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    err = res.stderr
    assert "MPICC" in err and "HDF5_DIR" in err and "PARMETIS_DIR" in err, err
    assert "docs/install.md" in err
    assert not (tmp_path / "venv").exists()
