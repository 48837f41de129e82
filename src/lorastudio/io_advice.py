"""What a user does about a failed write or read of the studio's, by errno: the end of a
WriteFailed's or ReadFailed's message (errors.py). The system's reason alone ("Operation not
permitted", "Input/output error") named the file but not what to do."""

from __future__ import annotations

import errno

# What a user does about each (a WriteFailed's message ends with it): the system's reason alone
# ("Operation not permitted") named the file but not what to do.
_NO_PERMISSION = "the user running the studio may not write there: give it write permission on that folder"
WRITE_ADVICE = {
    errno.EFBIG: "the file passed the largest file the studio's process may write (its file-size limit,"
    " `ulimit -f`, or the file system's largest file): raise that limit, then retry",
    errno.EROFS: "that file system is read-only: make it writable (or move the studio home), then retry",
    errno.EACCES: f"{_NO_PERMISSION}, then retry",
    errno.EPERM: f"{_NO_PERMISSION} (and lift an immutable attribute, `chattr -i`), then retry",
    errno.EIO: "the disk reported an I/O error: check the disk (and free space on it), then retry",
    errno.EBUSY: "it is a mount point (another file system mounted on that folder), which cannot be renamed or"
    " removed: unmount it (or mount it elsewhere and keep the files in a folder inside it), then retry",
}


# What a user does about a failed read of a file being copied in (a ReadFailed's message ends
# with it, as a WriteFailed's with WRITE_ADVICE: RELIABILITY 1284): the system's reason alone
# ("Input/output error") named the file but not what to do.
_GONE_MOUNT = "the network file system it is on went away: mount it again, then retry"
READ_ADVICE = {
    errno.EIO: "the disk (or network share) it is read from reported an I/O error: check it, or copy the file"
    " elsewhere first, then retry",
    errno.EACCES: "the user running the studio may not read it: give that user read permission on it, then retry",
    errno.EPERM: "the user running the studio may not read it: give that user read permission on it, then retry",
    errno.ESTALE: _GONE_MOUNT,
    errno.ENOTCONN: _GONE_MOUNT,
}
