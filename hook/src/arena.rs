//! The hook process's memory: a bump arena for a process that answers one call and exits. Blocks
//! come from one static region in order; a block freed or resized while it is the last one given
//! out is taken back or grown in place (most of Rust's temporaries die in that order), any other
//! free is kept until the exit returns everything. What does not fit goes to the system allocator,
//! so the arena has no failure mode of its own. `main.rs` installs it as the global allocator of
//! the `cmdgate-hook` binary only (not of the library's tests or other binaries).
//!
//! Why: a call allocates 140–360 KB in 370–2 800 blocks (`ls -la` to the 400-character compound
//! read). glibc's `malloc`/`free` spent ~65 k–0.5 M instructions on them, and musl's (the hook's
//! static build, `.ci/build-release`) maps and unmaps a region for many of them (~100 `mmap` and
//! `munmap` calls for the compound read). Here an allocation is an add and a compare-and-swap.
//!
//! Safety of the design: every block is a distinct, in-bounds, correctly aligned range of the
//! region, handed out once until it is taken back; a block is only taken back (or resized in place)
//! when it ends exactly at the current top, by a compare-and-swap on the top, so a stale or foreign
//! pointer can never move the top below live memory. Thread-safe (the hook has one thread, but
//! `GlobalAlloc` requires it). The region is `.bss`: its pages cost nothing until touched, and
//! the peak RSS stays under the goal (docs/benchmarks.md).
#![expect(
    unsafe_code,
    reason = "a global allocator hands out raw memory: `GlobalAlloc` is an unsafe trait, and the \
              region is a static shared through `UnsafeCell`"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The region's size. The compound read touches well under half of it; what does not fit goes
/// to the system allocator.
pub const SIZE: usize = 1 << 20;

/// The region, page-aligned so every alignment up to a page is met at offset 0.
#[repr(C, align(4096))]
struct Region(UnsafeCell<[u8; SIZE]>);

// SAFETY: the bytes of the region are only reached through blocks `Arena` hands out, each to one
// owner at a time (the compare-and-swap on `top` makes the hand-out exclusive across threads).
unsafe impl Sync for Region {}

/// A bump arena over its own static region (each `Arena` value owns one, so tests can make their
/// own). `top` is the offset of the first free byte.
pub struct Arena {
    region: &'static Region,
    top: AtomicUsize,
}

/// The region of the process's global allocator.
static GLOBAL: Region = Region(UnsafeCell::new([0; SIZE]));

impl Arena {
    /// The global allocator's arena (for `#[global_allocator]` in `main.rs`).
    pub const fn global() -> Arena {
        Arena {
            region: &GLOBAL,
            top: AtomicUsize::new(0),
        }
    }

    /// An arena over a fresh region from the system allocator (tests; leaked: a region lives as
    /// long as the process).
    pub fn leaked() -> Arena {
        let layout = Layout::new::<Region>();
        // SAFETY: `Region` has a non-zero size.
        let raw = unsafe { System.alloc_zeroed(layout) };
        assert!(!raw.is_null(), "no memory for a test region");
        // SAFETY: `raw` is a zeroed block with `Region`'s size and alignment, never freed; zero
        // bytes are a valid `[u8; SIZE]` inside an `UnsafeCell`.
        let region: &'static Region = unsafe { &*raw.cast::<Region>() };
        Arena {
            region,
            top: AtomicUsize::new(0),
        }
    }

    /// The first byte of the region.
    fn base(&self) -> *mut u8 {
        self.region.0.get().cast::<u8>()
    }

    /// The offset of `ptr` in the region, if it points into it.
    fn offset(&self, ptr: *mut u8) -> Option<usize> {
        let at = (ptr as usize).wrapping_sub(self.base() as usize);
        (at < SIZE).then_some(at)
    }

    /// How many bytes of the region are in use or lost to frees out of order (tests).
    pub fn used(&self) -> usize {
        self.top.load(Ordering::Relaxed)
    }

    /// A block for `layout` from the region, or `None` when it does not fit.
    fn bump(&self, layout: Layout) -> Option<*mut u8> {
        let base = self.base() as usize;
        let mut top = self.top.load(Ordering::Relaxed);
        loop {
            // The region is page-aligned; `Layout` guarantees a power-of-two alignment.
            let start = (base + top).checked_next_multiple_of(layout.align())? - base;
            let end = start.checked_add(layout.size())?;
            if end > SIZE {
                return None;
            }
            match self
                .top
                .compare_exchange_weak(top, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                // `start + size <= SIZE`: in bounds of the region.
                Ok(_) => return Some(self.base().wrapping_add(start)),
                Err(now) => top = now,
            }
        }
    }
}

// SAFETY: `alloc` returns blocks that are in bounds, aligned to `layout.align()`, at least
// `layout.size()` long and disjoint from every other live block (the top only moves past a block
// when it is handed out, and only back over a block that ends at the top and is being freed or
// resized by its owner); anything the region cannot serve is the system allocator's, and is given
// back to it (`offset` tells the two apart by address).
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout) {
            Some(p) => p,
            // SAFETY: the caller's contract for `layout` is `System`'s.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.offset(ptr) {
            Some(at) => {
                // Taken back only if it is the last block; else kept until the exit.
                let _ = self.top.compare_exchange(
                    at + layout.size(),
                    at,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            // SAFETY: not from the region, so `System` gave it out with this layout.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if let Some(at) = self.offset(ptr) {
            let end = at + layout.size();
            // The last block grows or shrinks in place when the region has room.
            if let Some(new_end) = at.checked_add(new_size).filter(|e| *e <= SIZE) {
                if self
                    .top
                    .compare_exchange(end, new_end, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    return ptr;
                }
            }
            // Any block shrinks in place (the tail is kept until the exit).
            if new_size <= layout.size() {
                return ptr;
            }
        }
        // SAFETY: the caller guarantees `new_size`, rounded up to `layout.align()`, does not
        // overflow `isize`, so the layout is valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new_layout` has a non-zero size (the caller's contract for `new_size`).
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live, disjoint (`new` was just handed out while `ptr` is
            // still owned), and at least `min(old, new)` bytes long.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn blocks_are_aligned_disjoint_and_writable() {
        let a = Arena::leaked();
        let mut blocks = Vec::new();
        for (i, (size, align)) in [(1, 1), (24, 8), (3, 2), (100, 64), (7, 4096), (5, 16)]
            .into_iter()
            .enumerate()
        {
            // SAFETY: non-zero sizes.
            let p = unsafe { a.alloc(layout(size, align)) };
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0, "alignment {align}");
            assert!(a.offset(p).is_some(), "from the region");
            // SAFETY: the block is `size` bytes long.
            unsafe { std::ptr::write_bytes(p, i as u8 + 1, size) };
            blocks.push((p, size, i as u8 + 1));
        }
        for (p, size, fill) in &blocks {
            // SAFETY: each block is live and `size` long.
            let bytes = unsafe { std::slice::from_raw_parts(*p, *size) };
            assert!(
                bytes.iter().all(|b| b == fill),
                "no block overwrote another"
            );
        }
        let mut ranges: Vec<(usize, usize)> = blocks
            .iter()
            .map(|(p, s, _)| (*p as usize, *p as usize + s))
            .collect();
        ranges.sort();
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "disjoint");
    }

    #[test]
    fn the_last_block_is_taken_back_others_are_kept() {
        let a = Arena::leaked();
        // SAFETY: non-zero sizes; each pointer freed once with its layout.
        unsafe {
            let x = a.alloc(layout(64, 8));
            let y = a.alloc(layout(64, 8));
            let after_y = a.used();
            a.dealloc(x, layout(64, 8));
            assert_eq!(a.used(), after_y, "x is not the last block: kept");
            a.dealloc(y, layout(64, 8));
            assert_eq!(a.used(), 64, "y was the last block: taken back");
            let z = a.alloc(layout(64, 8));
            assert_eq!(z, y, "its space is given out again");
        }
    }

    #[test]
    fn realloc_keeps_the_bytes_in_place_or_moved() {
        let a = Arena::leaked();
        // SAFETY: non-zero sizes; pointers used with the layouts they were given with.
        unsafe {
            let p = a.alloc(layout(16, 8));
            std::ptr::write_bytes(p, 0xAB, 16);
            let q = a.realloc(p, layout(16, 8), 4000);
            assert_eq!(q, p, "the last block grows in place");
            let r = a.alloc(layout(8, 8));
            let s = a.realloc(q, layout(4000, 8), 9000);
            assert_ne!(s, q, "not the last block any more: moved");
            let moved = std::slice::from_raw_parts(s, 16);
            assert!(moved.iter().all(|b| *b == 0xAB), "the bytes came along");
            let t = a.realloc(s, layout(9000, 8), 10);
            assert_eq!(t, s, "shrinks in place");
            assert!(!r.is_null());
        }
    }

    #[test]
    fn what_does_not_fit_goes_to_the_system_allocator() {
        let a = Arena::leaked();
        // SAFETY: non-zero sizes; each pointer freed once with its layout.
        unsafe {
            let big = a.alloc(layout(SIZE + 1, 8));
            assert!(!big.is_null());
            assert!(a.offset(big).is_none(), "from the system allocator");
            assert_eq!(a.used(), 0);
            std::ptr::write_bytes(big, 1, SIZE + 1);
            a.dealloc(big, layout(SIZE + 1, 8));
            // Fill the region, then one more block spills over.
            let most = a.alloc(layout(SIZE - 8, 8));
            assert!(a.offset(most).is_some());
            let spill = a.alloc(layout(64, 8));
            assert!(a.offset(spill).is_none(), "the region is full: system");
            // A region block that must grow past the end moves to the system allocator.
            let grown = a.realloc(most, layout(SIZE - 8, 8), SIZE + 8);
            assert!(a.offset(grown).is_none());
            assert_eq!(
                a.used(),
                0,
                "the region's last block was given back when it moved"
            );
            a.dealloc(spill, layout(64, 8));
            a.dealloc(grown, layout(SIZE + 8, 8));
        }
    }

    #[test]
    fn a_foreign_pointer_never_moves_the_top() {
        let a = Arena::leaked();
        let b = Arena::leaked();
        // SAFETY: non-zero sizes; `x` is freed to the arena that gave it out.
        unsafe {
            let x = a.alloc(layout(32, 8));
            let y = b.alloc(layout(32, 8));
            assert!(a.offset(y).is_none());
            assert_eq!(a.used(), 32);
            b.dealloc(y, layout(32, 8));
            assert_eq!(a.used(), 32, "b's free did not touch a");
            a.dealloc(x, layout(32, 8));
            assert_eq!(a.used(), 0);
        }
    }

    #[test]
    fn threads_never_share_a_block() {
        let a: &'static Arena = Box::leak(Box::new(Arena::leaked()));
        let handles: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for _ in 0..500 {
                        // SAFETY: a non-zero size.
                        let p = unsafe { a.alloc(layout(24, 8)) };
                        // SAFETY: 24 bytes long.
                        unsafe { std::ptr::write_bytes(p, t, 24) };
                        mine.push(p as usize);
                    }
                    for p in &mine {
                        // SAFETY: still live (never freed) and 24 bytes long.
                        let bytes = unsafe { std::slice::from_raw_parts(*p as *const u8, 24) };
                        assert!(bytes.iter().all(|b| *b == t));
                    }
                    mine
                })
            })
            .collect();
        let mut all: Vec<usize> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 2000, "every block distinct");
    }
}
