"""Finding the processes a test started, to check none outlives it."""
import os


def processes_mentioning(text, where="environ"):
    """Pids of other processes whose /proc/PID/<where> (environ or cmdline)
    contains text, such as one of the test's ports or folders."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/{where}", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found
