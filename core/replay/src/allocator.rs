//! PyTorch's CUDA caching allocator in figures: its size constants and the rounding rules the
//! doctor (which reads them back out of a state) and the generator (which simulates them)
//! share, as `c10/cuda/CUDACachingAllocator.cpp` defines them: `kMinBlockSize`, `kSmallSize`,
//! `kSmallBuffer`, `kLargeBuffer`, `kMinLargeAlloc`, `kRoundLarge`, `round_size`,
//! `get_allocation_size` and `should_split`, without the settings that change them
//! (`roundup_power2_divisions`, `max_split_size`, expandable segments), which their callers
//! apply where they model them.

/// Requests up to this size use the small pool (`kSmallSize`, 1 MiB).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Segment size of the small pool (`kSmallBuffer`, 2 MiB).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Segment size of the large pool for requests under [`MIN_LARGE_ALLOC`] (`kLargeBuffer`,
/// 20 MiB).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Requests from this size get a segment of their own size, rounded to [`ROUND_LARGE`]
/// (`kMinLargeAlloc`, 10 MiB).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Rounding of large segments (`kRoundLarge`, 2 MiB).
pub const ROUND_LARGE: u64 = 2 << 20;
/// Rounding of every block (`kMinBlockSize`, 512 bytes).
pub const MIN_BLOCK: u64 = 512;

/// A block size as the allocator rounds a request (`round_size` without
/// `roundup_power2_divisions`): at least [`MIN_BLOCK`], up to a multiple of it.
pub fn round_size(requested: u64) -> u64 {
    requested.max(1).div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
}

/// Whether a request of `size` bytes (rounded) is served from the small pool.
pub fn is_small(size: u64) -> bool {
    size <= SMALL_SIZE
}

/// The segment the allocator asks the device for when no cached block fits a request of
/// `size` bytes (already rounded): `get_allocation_size`.
pub fn segment_size(size: u64) -> u64 {
    if is_small(size) {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        round_large(size)
    }
}

/// `size` up to a multiple of [`ROUND_LARGE`].
pub fn round_large(size: u64) -> u64 {
    size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
}

/// Whether a free block split for a request leaves `remaining` bytes as a block of their own
/// (`should_split` without `max_split_size` and expandable segments): in the small pool a
/// remainder of at least [`MIN_BLOCK`], in the large pool one over [`SMALL_SIZE`].
pub fn should_split(small: bool, remaining: u64) -> bool {
    if small {
        remaining >= MIN_BLOCK
    } else {
        remaining > SMALL_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constants as `CUDACachingAllocator.cpp` writes them, in bytes.
    #[test]
    fn constants_are_pytorchs() {
        assert_eq!(MIN_BLOCK, 512);
        assert_eq!(SMALL_SIZE, 1_048_576);
        assert_eq!(SMALL_BUFFER, 2_097_152);
        assert_eq!(LARGE_BUFFER, 20_971_520);
        assert_eq!(MIN_LARGE_ALLOC, 10_485_760);
        assert_eq!(ROUND_LARGE, 2_097_152);
    }

    /// `round_size`: under `kMinBlockSize` gives `kMinBlockSize` (0 bytes too), otherwise up
    /// to the next multiple of it; a size a hostile file makes overflow stops at `u64::MAX`.
    #[test]
    fn requests_round_up_to_512_bytes() {
        for (requested, block) in [
            (0, 512),
            (1, 512),
            (511, 512),
            (512, 512),
            (513, 1024),
            (1000, 1024),
            ((4 << 20) + 1, (4 << 20) + 512),
            (u64::MAX, u64::MAX),
        ] {
            assert_eq!(round_size(requested), block, "round_size({requested})");
        }
    }

    /// `get_allocation_size`: up to 1 MiB a 2 MiB segment, under 10 MiB a 20 MiB one, from
    /// 10 MiB the request up to a multiple of 2 MiB.
    #[test]
    fn segments_are_sized_as_get_allocation_size() {
        const MIB: u64 = 1 << 20;
        for (size, segment) in [
            (512, 2 * MIB),
            (MIB, 2 * MIB),
            (MIB + 512, 20 * MIB),
            (10 * MIB - 512, 20 * MIB),
            (10 * MIB, 10 * MIB),
            (10 * MIB + 512, 12 * MIB),
            (100 * MIB + 1, 102 * MIB),
        ] {
            assert_eq!(segment_size(size), segment, "segment_size({size})");
        }
        assert!(is_small(MIB) && !is_small(MIB + 1));
    }

    /// `should_split`: the small pool keeps a remainder from 512 bytes, the large pool one over
    /// 1 MiB.
    #[test]
    fn remainders_split_as_should_split() {
        assert!(!should_split(true, 511));
        assert!(should_split(true, 512));
        assert!(!should_split(false, 1 << 20));
        assert!(should_split(false, (1 << 20) + 1));
    }
}
