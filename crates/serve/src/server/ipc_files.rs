//! IPC socket files: claimed before a bind (refusing one another process serves, removing a
//! stale one) and removed when the daemon stops, only while still its own.

use super::zerr;
use std::path::PathBuf;

/// The socket file of an `ipc://` endpoint (none for abstract `ipc://@name` and other transports).
pub(super) fn ipc_path(endpoint: &str) -> Option<PathBuf> {
    endpoint.strip_prefix("ipc://").filter(|p| !p.starts_with('@') && !p.is_empty()).map(PathBuf::from)
}

/// Makes sure binding `endpoint` takes nothing from another process. libzmq unlinks an existing
/// IPC socket file before it binds, so a second daemon would silently take the endpoint over
/// (and remove the file when it stops, leaving the first unreachable). So: if a process accepts
/// a connection on the file, refuse; if nobody listens (a file left by a killed daemon), remove
/// it as stale; a path that is not a socket is refused, never removed. (A process binding the
/// same path between this check and the bind is not caught; daemons started one after the
/// other are.)
pub fn claim_ipc(endpoint: &str) -> Result<(), String> {
    let Some(path) = ipc_path(endpoint) else { return Ok(()) };
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let Ok(meta) = std::fs::symlink_metadata(&path) else { return Ok(()) };
        if !meta.file_type().is_socket() {
            return Err(format!("{endpoint}: {} exists and is not a socket; not touching it", path.display()));
        }
        match std::os::unix::net::UnixStream::connect(&path) {
            Ok(_) => return Err(format!("{endpoint} is in use by another process")),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                std::fs::remove_file(&path).map_err(|e| format!("{endpoint}: removing the stale socket file: {e}"))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{endpoint}: cannot tell whether another process uses it: {e}")),
        }
    }
    Ok(())
}

/// Binds `sock` to `endpoint`, first checking (IPC) that no other process serves there; returns
/// the guard that removes the socket file when the daemon stops.
pub(super) fn bind_endpoint(sock: &zmq::Socket, endpoint: &str) -> Result<IpcFile, String> {
    claim_ipc(endpoint)?;
    sock.bind(endpoint).map_err(|e| zerr(&format!("bind {endpoint}"), e))?;
    Ok(IpcFile::bound(endpoint))
}

/// Removes a socket file this daemon bound when dropped, only if it is still the daemon's own
/// (the same inode): a file another process put there meanwhile is left alone.
pub(super) struct IpcFile(Option<(PathBuf, u64, u64)>);

impl IpcFile {
    pub(super) fn bound(endpoint: &str) -> IpcFile {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let path = ipc_path(endpoint);
            IpcFile(path.and_then(|p| std::fs::symlink_metadata(&p).ok().map(|m| (p, m.dev(), m.ino()))))
        }
        #[cfg(not(unix))]
        {
            let _ = endpoint;
            IpcFile(None)
        }
    }
}

impl Drop for IpcFile {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some((p, dev, ino)) = &self.0 {
            use std::os::unix::fs::MetadataExt;
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.dev() == *dev && m.ino() == *ino) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}
