//! Copying and filling small arrays with one store per element.
//!
//! In BPF, LLVM compiles an array assignment, an array literal or a zeroing loop into a call to
//! `memmove` or `memset`, which bpf-linker provides as a loop over single bytes: a function call
//! and a loop, on every packet. Volatile stores are never merged back into such a call.

/// `*dst = *src`, element by element.
#[inline(always)]
pub fn copy<T: Copy, const N: usize>(dst: &mut [T; N], src: &[T; N]) {
    for (to, from) in dst.iter_mut().zip(src) {
        // SAFETY: `to` is a valid, exclusive reference.
        unsafe { core::ptr::write_volatile(to, *from) };
    }
}

/// `*dst = [value; N]`, element by element.
#[inline(always)]
pub fn fill<T: Copy, const N: usize>(dst: &mut [T; N], value: T) {
    for to in dst.iter_mut() {
        // SAFETY: `to` is a valid, exclusive reference.
        unsafe { core::ptr::write_volatile(to, value) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_and_fills_every_element() {
        let mut dst = [0u8; 5];
        copy(&mut dst, &[1, 2, 3, 4, 5]);
        assert_eq!(dst, [1, 2, 3, 4, 5]);
        let mut slots = [[7u8; 16]; 3];
        fill(&mut slots, [0; 16]);
        assert_eq!(slots, [[0; 16]; 3]);
    }
}
