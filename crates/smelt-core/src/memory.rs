//! How the process's heap holds memory: one glibc arena per core, and freed memory handed
//! back to the operating system (both nothing on other platforms).

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

/// One glibc malloc arena per core instead of glibc's default of up to eight per core:
/// memory a thread frees in its arena is not reused by threads of other arenas, so with
/// the runtime's, rayon's and the Parquet readers' threads a run held far more than its
/// heap. One arena per core cut the peak RSS of an increment by 8–25% in the same time
/// (bench/NOTES.md, "One malloc arena per core"). `MALLOC_ARENA_MAX`, when set, rules.
/// Call it first in `main`, before any other thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            return;
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let arenas = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
        #[allow(unsafe_code)]
        // SAFETY: `mallopt` only sets a parameter of the allocator; a value it refuses
        // leaves the default (it returns 0, ignored).
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}
