//! Zeroed bucket arrays for the key tables.
//!
//! A lookup touches one random bucket per key across hundreds of MiB of
//! tables; with 4 KiB pages nearly every one of those loads also misses the
//! TLB, and the page walk (two-dimensional under a hypervisor) costs more than
//! the load itself. So on Linux arrays of 2 MiB and more are mapped directly
//! (anonymous, 2 MiB aligned, zero-filled lazily by the kernel) and advised to
//! use transparent huge pages. Smaller arrays, other systems, and a mapping
//! the kernel refuses use an ordinary `Vec`. The advice is only a hint: with
//! THP disabled the mapping behaves like any heap allocation.

use std::ops::{Deref, DerefMut};

/// A bucket: `(key, slot)`.
pub type Bucket = [u64; 2];

/// A zeroed, fixed-length bucket array.
#[derive(Debug)]
pub struct Buckets {
    repr: Repr,
}

#[derive(Debug)]
enum Repr {
    Heap(Vec<Bucket>),
    #[cfg(target_os = "linux")]
    Mapped(huge::Mapping),
}

impl Buckets {
    /// `len` zeroed buckets.
    pub fn zeroed(len: usize) -> Self {
        #[cfg(target_os = "linux")]
        if let Some(m) = huge::Mapping::new(len) {
            return Buckets { repr: Repr::Mapped(m) };
        }
        Buckets { repr: Repr::Heap(vec![[0, 0]; len]) }
    }

    /// Whether the array is a huge-page-advised mapping.
    #[cfg(test)]
    pub fn is_mapped(&self) -> bool {
        !matches!(self.repr, Repr::Heap(_))
    }
}

impl Deref for Buckets {
    type Target = [Bucket];

    fn deref(&self) -> &[Bucket] {
        match &self.repr {
            Repr::Heap(v) => v,
            #[cfg(target_os = "linux")]
            Repr::Mapped(m) => m.as_slice(),
        }
    }
}

impl DerefMut for Buckets {
    fn deref_mut(&mut self) -> &mut [Bucket] {
        match &mut self.repr {
            Repr::Heap(v) => v,
            #[cfg(target_os = "linux")]
            Repr::Mapped(m) => m.as_mut_slice(),
        }
    }
}

#[cfg(target_os = "linux")]
mod huge {
    use std::ptr::NonNull;

    use super::Bucket;

    /// Size of a huge page, and the smallest array worth mapping.
    const HUGE: usize = 2 << 20;

    /// An anonymous private mapping holding `len` buckets at a 2 MiB boundary.
    #[derive(Debug)]
    pub struct Mapping {
        base: NonNull<libc::c_void>,
        map_len: usize,
        data: NonNull<Bucket>,
        len: usize,
    }

    // SAFETY: the mapping is owned exclusively by this value (like a `Vec`'s
    // buffer); access goes through `&self` / `&mut self` slices only.
    unsafe impl Send for Mapping {}
    // SAFETY: see `Send`; shared access is read-only.
    unsafe impl Sync for Mapping {}

    impl Mapping {
        pub fn new(len: usize) -> Option<Self> {
            let bytes = len.checked_mul(std::mem::size_of::<Bucket>())?;
            if bytes < HUGE {
                return None;
            }
            let map_len = bytes.checked_add(HUGE)?;
            // SAFETY: a fresh anonymous private mapping; no existing memory is affected.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return None;
            }
            let base = NonNull::new(base)?;
            let offset = (HUGE - (base.as_ptr() as usize) % HUGE) % HUGE;
            // SAFETY: offset < HUGE and offset + bytes <= map_len, so the range is inside the mapping.
            let data = unsafe { base.as_ptr().cast::<u8>().add(offset) };
            // SAFETY: advisory only, on a range inside our own mapping; failure is harmless.
            unsafe { libc::madvise(data.cast(), bytes, libc::MADV_HUGEPAGE) };
            let data = NonNull::new(data.cast::<Bucket>())?;
            Some(Mapping { base, map_len, data, len })
        }

        pub fn as_slice(&self) -> &[Bucket] {
            // SAFETY: `data` is aligned (2 MiB), points to `len` buckets inside the
            // mapping, zero-initialised by the kernel (all-zero is a valid `[u64; 2]`).
            unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
        }

        pub fn as_mut_slice(&mut self) -> &mut [Bucket] {
            // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
            unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.len) }
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly the mapping created in `new`; no slice outlives `self`.
            unsafe { libc::munmap(self.base.as_ptr(), self.map_len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_arrays_live_on_the_heap_and_large_ones_are_mapped_zeroed() {
        let small = Buckets::zeroed(64);
        assert!(!small.is_mapped());
        assert_eq!(small.len(), 64);
        let mut large = Buckets::zeroed(1 << 18); // 4 MiB
        assert_eq!(cfg!(target_os = "linux"), large.is_mapped());
        assert_eq!(large.len(), 1 << 18);
        assert!(large.iter().all(|b| *b == [0, 0]));
        let last = large.len() - 1;
        large[last] = [7, 9];
        large[0][1] = 3;
        assert_eq!((large[0], large[last]), ([0, 3], [7, 9]));
        assert_eq!(large.as_ptr() as usize % (2 << 20), 0, "huge-page aligned");
    }
}
