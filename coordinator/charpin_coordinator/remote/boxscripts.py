"""The scripts a box runs, as `python3 -I -c SCRIPT ARGS...`. Coordinator side; imports snapshot.

They execute ON the box, so their text must stay stdlib only and valid on Python >= 3.9; values
only ever reach them as argv or stdin, never spliced into the source.
"""

from __future__ import annotations

from charpin_coordinator.remote import snapshot

PREP = (
    snapshot.BOX_HAVES_DEF
    + r"""
import hashlib, importlib.util, json, os, shutil, sys
home, run_id, folder, repo_key, runner_name, need_venv, commit, limit = sys.argv[1:9]
config = sys.stdin.buffer.read()
home = home or os.path.expanduser("~")  # SSH boxes: no separate round trip for $HOME
def report(problem="", **extra):
    print(json.dumps(dict(problem=problem, **extra)))
    sys.exit(0)
if sys.version_info < (3, 9):
    report("python %d.%d is too old; install python3 >= 3.9 or set python = \"/path/to/python3\""
           % sys.version_info[:2])
if need_venv == "1":
    missing = [m for m in ("venv", "ensurepip") if importlib.util.find_spec(m) is None]
    if missing:
        report("%s lacks %s; install python3-venv (Debian/Ubuntu) or set python to an "
               "interpreter that has it" % (sys.executable, " and ".join(missing)))
if shutil.which("git") is None:
    report("git is not installed on the box; install git")
root = os.path.join(home, ".cache", "charpin")
run = os.path.join(root, "runs", run_id, folder)
for sub in ("runners", "repos", "venvs", os.path.join("runs", run_id)):
    os.makedirs(os.path.join(root, sub), exist_ok=True)
os.mkdir(run)  # a run folder is never reused
runner = os.path.join(root, "runners", runner_name)
sha = ""
if os.path.isfile(runner):
    with open(runner, "rb") as handle:
        sha = hashlib.sha256(handle.read()).hexdigest()
names = {"src": "src", "config": "config.json", "receipt": "receipt.json", "stdout": "stdout.log",
         "stderr": "stderr.log", "pid": "pid", "bundle": "snapshot.bundle"}
paths = {key: os.path.join(run, name) for key, name in names.items()}
paths.update(run=run, runner=runner, venvs=os.path.join(root, "venvs"),
             cache_repo=os.path.join(root, "repos", repo_key + ".git"))
with open(paths["config"], "wb") as handle:
    handle.write(config)
has, haves = box_haves(paths["cache_repo"], commit, int(limit))
report(paths=paths, runner_sha256=sha, has_pytest=importlib.util.find_spec("pytest") is not None,
       python=sys.version.split()[0], has=has, haves=haves, bwrap=shutil.which("bwrap") is not None)
"""
)

SETUP = r"""
import fcntl, glob, hashlib, json, os, shutil, subprocess, sys, time
venvs, src, commands, deadline = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), float(sys.argv[4])
ends = time.monotonic() + deadline
key = hashlib.sha256(sys.version.encode() + json.dumps(commands).encode())
deps = ["pyproject.toml", "setup.cfg", "setup.py", "poetry.lock", "uv.lock"]
deps += [os.path.basename(p) for p in glob.glob(os.path.join(src, "requirements*.txt"))]
for name in sorted(set(deps)):
    path = os.path.join(src, name)
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            key.update(name.encode() + b"\0" + handle.read() + b"\0")
venv = os.path.join(venvs, key.hexdigest()[:20])
python = os.path.join(venv, "bin", "python")
with open(venv + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # boxes sharing one home must not build one venv twice
    cached = os.path.exists(os.path.join(venv, ".ok"))
    if not cached:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, stdout=sys.stderr)
        env = dict(os.environ, VIRTUAL_ENV=venv,
                   PATH=os.path.join(venv, "bin") + os.pathsep + os.environ.get("PATH", ""))
        for command in commands:
            left = ends - time.monotonic()
            done = subprocess.run(command, shell=True, cwd=src, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=max(left, 1))
            if done.returncode != 0:
                sys.stderr.write(done.stdout.decode("utf-8", "replace")[-2000:])
                sys.exit("setup command %r exited %d" % (command, done.returncode))
        open(os.path.join(venv, ".ok"), "w").close()
print(json.dumps({"python": python, "venv": venv, "cached": cached}))
"""

LAUNCH = r"""
import json, os, subprocess, sys
# The allow-listed variables and the receipt's seal key arrive on stdin: values never appear in
# argv (ps, sshd logs, /proc/PID/cmdline of a test that looks at its parents).
run, argv = sys.argv[1], sys.argv[2:]
given = json.loads(sys.stdin.buffer.read() or b"{}")
env = dict(os.environ)
env.update(item.split("=", 1) for item in given.get("env", []))
with open(os.path.join(run, "stdout.log"), "wb") as out, \
        open(os.path.join(run, "stderr.log"), "wb") as err:
    proc = subprocess.Popen(argv, cwd=os.path.join(run, "src"), env=env, stdin=subprocess.PIPE,
                            stdout=out, stderr=err, start_new_session=True)
# The runner reads this one line first thing and closes its input; the pipe holds it meanwhile.
# A runner that dies before reading (a broken interpreter) closes the pipe first: the missing
# seal then refuses its receipt, so a broken pipe here is not this script's failure.
try:
    proc.stdin.write(given.get("key", "").encode() + b"\n")
    proc.stdin.close()
except BrokenPipeError:
    pass
with open(os.path.join(run, "pid"), "w") as handle:
    handle.write(str(proc.pid))
print(proc.pid)
"""

WAIT = r"""
import os, sys, time
pid, seconds = int(sys.argv[1]), float(sys.argv[2])
def gone():
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
ends = time.monotonic() + seconds
while not gone() and time.monotonic() < ends:
    time.sleep(0.05)
print("gone" if gone() else "running")
"""

KILL = r"""
import os, signal, sys, time
pid, wait = int(sys.argv[1]), float(sys.argv[2])
run = os.path.dirname(os.readlink("/proc/%d/cwd" % pid)) if os.path.exists("/proc/%d" % pid) else ""
def alive():
    try:
        os.killpg(pid, 0)
        return True
    except OSError:
        return False
try:
    os.killpg(pid, signal.SIGTERM)  # the runner stops its tests and writes a receipt
except OSError:
    pass
ends = time.monotonic() + wait
while alive() and time.monotonic() < ends:
    time.sleep(0.1)
try:
    os.killpg(pid, signal.SIGKILL)
except OSError:
    pass
# Anything else still working inside this run's folder (a test that escaped the group) goes too.
if run:
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cwd = os.readlink("/proc/%s/cwd" % entry)
            except OSError:
                continue
            if cwd == run or cwd.startswith(run + os.sep):
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    pass
"""

CLEAN = r"""
import os, shutil, sys
run, discard = sys.argv[1], sys.argv[2:]
# Caches an unverified run may have written (no sealed receipt came back): the next run
# rebuilds them rather than trusting them.
for path in discard:
    shutil.rmtree(path, ignore_errors=True)
if run:
    shutil.rmtree(run, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(run))  # runs/<run-id>, once the last box of this run is gone
    except OSError:
        pass
"""

TAIL = r"""
import os, sys
path, size = sys.argv[1], int(sys.argv[2])
with open(path, "rb") as handle:
    handle.seek(max(0, os.fstat(handle.fileno()).st_size - size))
    sys.stdout.buffer.write(handle.read(size))
"""
