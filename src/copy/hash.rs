//! Content hashing: xxh3-128 over fixed 1 MiB blocks, then xxh3-128 over the block digests and
//! the size. Because blocks are fixed, the value does not depend on chunk size or parallelism:
//! any chunk that starts on a block boundary can be hashed on its own.

use std::fmt;

use xxhash_rust::xxh3::{xxh3_128, Xxh3};

/// Size of one hashed block. Chunk sizes are multiples of it.
pub const BLOCK: u64 = 1024 * 1024;

/// The content hash of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentHash(pub u128);

impl ContentHash {
    /// Combines the digests of all blocks of an object, in order, with its size.
    pub fn from_blocks(blocks: &[u128], size: u64) -> Self {
        let mut buf = Vec::with_capacity(blocks.len() * 16 + 8);
        for b in blocks {
            buf.extend_from_slice(&b.to_le_bytes());
        }
        buf.extend_from_slice(&size.to_le_bytes());
        ContentHash(xxh3_128(&buf))
    }

    /// Hashes a whole buffer at once (small objects, tests).
    pub fn of(data: &[u8]) -> Self {
        let mut h = BlockHasher::new();
        h.update(data);
        ContentHash::from_blocks(&h.finish(), data.len() as u64)
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Streams bytes of one block-aligned range and yields one digest per block.
pub struct BlockHasher {
    hasher: Xxh3,
    in_block: u64,
    digests: Vec<u128>,
}

impl Default for BlockHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockHasher {
    pub fn new() -> Self {
        BlockHasher {
            hasher: Xxh3::new(),
            in_block: 0,
            digests: Vec::new(),
        }
    }

    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = (BLOCK - self.in_block) as usize;
            let take = room.min(data.len());
            self.hasher.update(&data[..take]);
            self.in_block += take as u64;
            data = &data[take..];
            if self.in_block == BLOCK {
                self.digests.push(self.hasher.digest128());
                self.hasher.reset();
                self.in_block = 0;
            }
        }
    }

    /// The digests of the blocks seen, the last one partial if the range did not end on a
    /// block boundary. An empty range has no blocks.
    pub fn finish(mut self) -> Vec<u128> {
        if self.in_block > 0 {
            self.digests.push(self.hasher.digest128());
        }
        self.digests
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn hash_does_not_depend_on_chunking() {
        let sizes = [
            0usize,
            1,
            1000,
            BLOCK as usize,
            BLOCK as usize + 7,
            5 * BLOCK as usize + 3,
        ];
        for size in sizes {
            let d = data(size);
            let whole = ContentHash::of(&d);
            for chunk_blocks in [1usize, 2, 3] {
                let chunk = chunk_blocks * BLOCK as usize;
                let mut blocks = Vec::new();
                for part in d.chunks(chunk) {
                    // feed each chunk in odd-sized pieces, as a network stream would
                    let mut h = BlockHasher::new();
                    for piece in part.chunks(65_537) {
                        h.update(piece);
                    }
                    blocks.extend(h.finish());
                }
                assert_eq!(
                    ContentHash::from_blocks(&blocks, size as u64),
                    whole,
                    "size {size} chunk {chunk}"
                );
            }
        }
    }

    #[test]
    fn hash_sees_content_and_size() {
        let a = data(3000);
        let mut b = a.clone();
        b[1234] ^= 1;
        assert_ne!(ContentHash::of(&a), ContentHash::of(&b));
        assert_ne!(ContentHash::of(&[]), ContentHash::of(&[0]));
        assert_eq!(ContentHash::of(&a).to_string().len(), 32);
    }
}
