"""A process that dies mid-work for the leftover tests: it starts what selection or a non-chief
worker does (the real code), prints the directory it made, then hangs until killed.

    python leftover_maker.py select <candidate> <base>
    python leftover_maker.py worker <tmpdir>
    python leftover_maker.py chief <candidates dir>
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

kind = sys.argv[1]
if kind == "select":
    from training import select

    real_copytree = shutil.copytree

    def copy_then_hang(src, dst, *args, **kw):  # killed "while copying"
        shutil.copytree = real_copytree  # copytree recurses through the module attribute
        real_copytree(src, dst, *args, **kw)
        print(f"staging {Path(dst).parent}", flush=True)  # the copy goes to <staging>/<version>
        time.sleep(600)

    shutil.copytree = copy_then_hang
    select.publish(Path(sys.argv[2]), Path(sys.argv[3]))
elif kind == "chief":
    from training import export, train
    from training.tf_config import TaskInfo

    def export_then_hang(model, export_dir, **_):  # killed while exporting its candidate
        Path(export_dir, "saved_model.pb").write_bytes(b"partial")
        print(f"staging {export_dir}", flush=True)
        time.sleep(600)

    export.export_saved_model = export_then_hang
    candidates = Path(sys.argv[2])
    train.export_candidate(None, candidates / "cnn", TaskInfo(), candidates, False)
else:
    from training import train
    from training.tf_config import TaskInfo

    tempfile.tempdir = sys.argv[2]
    task = TaskInfo({"worker": ["a:1", "b:1"]}, "worker", 1)
    args = argparse.Namespace(checkpoint_dir="x", model_type="cnn", run_id="r")
    dirs = train.run_dirs(args, task)
    print(f"scratch {dirs['scratch']}", flush=True)
    time.sleep(600)
