//! Handing freed heap memory back to the operating system.

/// Returns the pages of freed heap memory to the operating system: glibc's `malloc_trim`,
/// elsewhere nothing. glibc keeps freed blocks for later allocations, but many small
/// scattered blocks cannot serve a large one: after small buffers are copied into a few
/// large arrays and freed, the process would otherwise keep the pages of both.
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: `malloc_trim` takes no pointer and only gives the pages of free blocks back
    // to the kernel (it is thread-safe: each arena is trimmed under its lock).
    unsafe {
        libc::malloc_trim(0);
    }
}
