"""A stand-in replica for launcher tests: worker 1 fails, everybody else waits for a long time."""

import json
import os
import sys
import time

task = json.loads(os.environ["TF_CONFIG"])["task"]
name = f"{task['type']}-{task['index']}"
print(f"replica {name} up, pid={os.getpid()}, args={sys.argv[1:]}", flush=True)
if task["type"] == "worker" and task["index"] == 1 and "--fail" in sys.argv:
    print("simulated crash in worker 1", flush=True)
    sys.exit(3)
if "--fail" in sys.argv or "--sleep" in sys.argv:
    time.sleep(300)
