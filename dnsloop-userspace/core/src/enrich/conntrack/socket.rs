//! A blocking `NETLINK_NETFILTER` socket that gives up on the kernel after a timeout.
use std::{io, os::fd::AsRawFd, time::Duration};

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use super::ConntrackError;

#[derive(Debug)]
pub struct NetfilterSocket {
    socket: Socket,
}

impl NetfilterSocket {
    /// Opens a socket in the calling thread's network namespace, connected to the kernel.
    pub fn open(reply_timeout: Duration) -> Result<Self, ConntrackError> {
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(ConntrackError::Open)?;
        socket.bind_auto().map_err(ConntrackError::Open)?;
        // Port 0 is the kernel.
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(ConntrackError::Open)?;
        set_receive_timeout(&socket, reply_timeout).map_err(ConntrackError::Open)?;
        Ok(Self { socket })
    }

    /// Sends one request and returns the one message the kernel answers it with.
    pub fn exchange(&self, request: &[u8]) -> Result<Vec<u8>, ConntrackError> {
        self.socket.send(request, 0).map_err(ConntrackError::Send)?;
        let (reply, _kernel) = self
            .socket
            .recv_from_full()
            .map_err(ConntrackError::Receive)?;
        Ok(reply)
    }
}

/// netlink-sys has no timeout of its own; `SO_RCVTIMEO` bounds every blocking receive.
fn set_receive_timeout(socket: &Socket, timeout: Duration) -> io::Result<()> {
    let timeval = libc::timeval {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        // Below 1_000_000: fits any suseconds_t.
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: setsockopt reads `size_of::<timeval>()` bytes from a live timeval, on a descriptor
    // the socket owns.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
