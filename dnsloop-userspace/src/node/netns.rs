//! Network namespace identity.
use std::io;

/// `SO_NETNS_COOKIE` (Linux 5.14+): the same cookie `bpf_get_netns_cookie` returns in the kernel.
const SO_NETNS_COOKIE: libc::c_int = 71;

/// The cookie of the calling thread's network namespace.
pub fn current_cookie() -> io::Result<u64> {
    // SAFETY: plain socket/getsockopt/close calls on a descriptor we own.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut cookie: u64 = 0;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        let rc = libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        );
        let result = if rc == 0 {
            Ok(cookie)
        } else {
            Err(io::Error::last_os_error())
        };
        libc::close(fd);
        result
    }
}
