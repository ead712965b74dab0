"""`python userns_exec.py -- ARGV...`: exec ARGV in a new user namespace in which UID and
GID 2000 (the sandbox user) are a host ID of their own and every other ID below 65,536
is itself.

Resource limits are counted per user: RLIMIT_NPROC counts every process of UID 2000 in
a user namespace. Contained servers (tests/contained.py) that ran their agents as the
host's UID 2000 shared that count, so one test's fork bomb made another test's shell
fail with "fork: Resource temporarily unavailable". Here each server's UID 2000 is a
random host UID above 2**31 (`uid_map`, read from /proc/PID/uid_map, says which).

`enter()` does the same in the calling (single-threaded) process, for servers forked rather
than executed (tests/forked_server.py).

Run as root: the namespace's root is the host's root (UID 0 is mapped to itself), with
its capabilities over the namespaces it then makes (mount, PID, IPC: `unshare`), not
over the host's.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import sys

CLONE_NEWUSER = 0x10000000
SANDBOX_ID = 2000
IDENTITY_UP_TO = 65536
HOST_ID_FLOOR = 2**31


def mapping(host_id: int) -> str:
    return (
        f"0 0 {SANDBOX_ID}\n{SANDBOX_ID} {host_id} 1\n"
        f"{SANDBOX_ID + 1} {SANDBOX_ID + 1} {IDENTITY_UP_TO - SANDBOX_ID - 1}\n"
    )


def enter() -> None:
    """Move this (single-threaded) process into a new user namespace mapped as above;
    OSError if it cannot."""
    host_id = HOST_ID_FLOOR + secrets.randbelow(2**30)
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    target = os.getpid()
    child = os.fork()
    if child == 0:  # writes the maps of the namespace its parent enters (only the parent's
        os.close(ready_w)  # namespace may: the child stays in the host's)
        os.close(done_r)
        status = b"0"
        try:
            if os.read(ready_r, 1) == b"1":
                for name in ("uid_map", "gid_map"):
                    with open(f"/proc/{target}/{name}", "w") as f:
                        f.write(mapping(host_id))
                status = b"1"
        finally:
            os.write(done_w, status)
            os._exit(0)
    os.close(ready_r)
    os.close(done_w)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUSER) != 0:
            errno = ctypes.get_errno()
            os.write(ready_w, b"0")
            raise OSError(errno, f"unshare(CLONE_NEWUSER) failed: {os.strerror(errno)}")
        os.write(ready_w, b"1")
        written = os.read(done_r, 1)
    finally:
        os.waitpid(child, 0)  # reaped: the caller's only children are its own
        os.close(ready_w)
        os.close(done_r)
    if written != b"1":
        raise OSError("the user namespace's ID maps could not be written")


def main(argv: list[str]) -> None:
    if argv[:1] != ["--"] or len(argv) < 2:
        sys.exit("usage: userns_exec.py -- ARGV...")
    try:
        enter()
    except OSError as exc:
        sys.exit(str(exc))
    os.execvp(argv[1], argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
