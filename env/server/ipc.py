"""Remove the System V IPC objects (message queues, shared memory, semaphores) of a UID.

They live in the kernel, not in any directory, so deleting files never reaches them:
an episode could leave a message queue for the next. The kernel lists them in
/proc/sysvipc/{msg,shm,sem} (this IPC namespace's objects); each one owned or created
by the sandbox UID is removed with IPC_RMID. Root may lack the capability for that (a
container without CAP_SYS_ADMIN in its IPC namespace): then the objects are removed as
the sandbox UID itself, their creator, with util-linux's ipcrm. POSIX message queues
and POSIX shared memory are files (in /dev/mqueue and /dev/shm) and go with the
temporary files.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import subprocess
from pathlib import Path

SYSVIPC = Path("/proc/sysvipc")
IPC_RMID = 0
# (listing, id column, libc function); semctl takes a fourth (unused) argument.
_KINDS = (("msg", "msqid", "msgctl"), ("shm", "shmid", "shmctl"), ("sem", "semid", "semctl"))
_IPCRM_FLAG = {"msg": "-q", "shm": "-m", "sem": "-s"}
IPCRM = "/usr/bin/ipcrm"


class IpcError(RuntimeError):
    """An IPC object of the sandbox could not be removed."""


def sandbox_ipc_objects(uid: int) -> list[tuple[str, int]]:
    """(kind, id) of every SysV IPC object whose owner or creator is ``uid``."""
    found = []
    for kind, id_column, _ in _KINDS:
        try:
            lines = (SYSVIPC / kind).read_text().splitlines()
        except FileNotFoundError:
            continue
        if not lines:
            continue
        header = lines[0].split()
        at = {name: header.index(name) for name in (id_column, "uid", "cuid")}
        for line in lines[1:]:
            fields = line.split()
            if str(uid) in (fields[at["uid"]], fields[at["cuid"]]):
                found.append((kind, int(fields[at[id_column]])))
    return found


def remove_sandbox_ipc(uid: int, gid: int) -> int:
    """Remove every SysV IPC object of ``uid``; return how many. IpcError if one stays."""
    objects = sandbox_ipc_objects(uid)
    if not objects:
        return 0
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    functions = {kind: getattr(libc, name) for kind, _, name in _KINDS}
    refused = []
    for kind, ident in objects:
        args = (ident, 0, IPC_RMID, None) if kind == "sem" else (ident, IPC_RMID, None)
        if functions[kind](*args) == 0:
            continue
        failure = ctypes.get_errno()
        if failure == errno.EPERM:
            refused.append((kind, ident))
        elif failure not in (errno.EINVAL, errno.EIDRM):  # those mean it is gone already
            raise IpcError(f"SysV {kind} object {ident} of UID {uid} could not be removed: "
                           f"{errno.errorcode.get(failure, failure)}")
    if refused:
        _remove_as(uid, gid, refused)
    left = sandbox_ipc_objects(uid)
    if left:
        raise IpcError(f"SysV IPC objects of UID {uid} still present after removal: {left}")
    return len(objects)


def _remove_as(uid: int, gid: int, objects: list[tuple[str, int]]) -> None:
    argv = [IPCRM]
    for kind, ident in objects:
        argv += [_IPCRM_FLAG[kind], str(ident)]
    try:
        done = subprocess.run(argv, user=uid, group=gid, extra_groups=[], capture_output=True, timeout=10,
                              env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd="/")
    except FileNotFoundError as exc:
        raise IpcError(f"removing {objects} as UID {uid} needs {IPCRM} (Debian package util-linux)") from exc
    if done.returncode != 0:
        raise IpcError(f"ipcrm as UID {uid} could not remove {objects}: "
                       f"{done.stderr.decode(errors='replace').strip()}")
