//! A blocking netlink socket to the kernel that gives up on it after a timeout.
use std::{io, os::fd::AsRawFd, time::Duration};

use netlink_sys::{Socket, SocketAddr};

#[derive(Debug)]
pub struct NetlinkSocket {
    socket: Socket,
}

impl NetlinkSocket {
    /// Opens a socket of netlink `protocol` in the calling thread's network namespace,
    /// connected to the kernel.
    pub fn open(protocol: isize, reply_timeout: Duration) -> io::Result<Self> {
        let mut socket = Socket::new(protocol)?;
        socket.bind_auto()?;
        // Port 0 is the kernel.
        socket.connect(&SocketAddr::new(0, 0))?;
        set_receive_timeout(&socket, reply_timeout)?;
        Ok(Self { socket })
    }

    pub fn send(&self, request: &[u8]) -> io::Result<()> {
        self.socket.send(request, 0).map(|_| ())
    }

    /// The next datagram from the kernel: one or more netlink messages.
    pub fn receive(&self) -> io::Result<Vec<u8>> {
        let (reply, _kernel) = self.socket.recv_from_full()?;
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
