//! The generated bucket: key `i` of `n`, its size, its bytes and its time, all computed from
//! (seed, i) so that nothing is stored, and keys sorted as their indexes so that a listing
//! from any point is a binary search and a walk: O(page), not O(bucket).

use std::fmt::Write as _;

use s3s::crypto::Checksum;

/// How the keys are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// Two levels of folders of 256 entries each (a content store's fan-out):
    /// `PREFIX/NNN-word/NNN-word/NNN-word…`.
    Tree,
    /// One flat prefix of millions of keys: `PREFIX/NNNNNNNNNN-word…`.
    Flat,
}

/// What the generated bucket holds.
#[derive(Debug, Clone)]
pub struct Spec {
    pub n: u64,
    pub shape: Shape,
    pub seed: u64,
    /// Mean and spread of the sizes: uniform in [mean - spread, mean + spread].
    pub mean: u64,
    pub spread: u64,
    /// Every key begins with it (`data/`, or empty).
    pub prefix: String,
}

/// SplitMix64: a full-period mixer, enough to make sizes, names and bytes from an index.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Syllables of the generated names: ASCII mostly, some accented Latin, some CJK, a space.
const SYL: [&str; 16] = [
    "ka", "lo", "mi", "nu", "re", "sa", "ti", "vo", "zé", "日本", "ün", "de", "ra", "po", "_", " x",
];

/// A name of `min..=max` characters made from `h`.
fn word(mut h: u64, min: usize, max: usize) -> String {
    let want = min + (h % (max - min + 1) as u64) as usize;
    let mut s = String::new();
    let mut chars = 0;
    while chars < want {
        h = mix(h);
        let syl = SYL[(h % SYL.len() as u64) as usize];
        for c in syl.chars() {
            if chars < want {
                s.push(c);
                chars += 1;
            }
        }
    }
    // a name never ends in a space (keys with trailing blanks are legal, but rare)
    if s.ends_with(' ') {
        s.pop();
        s.push('e');
    }
    s
}

const FAN: u64 = 256;

impl Spec {
    /// Key `i`: sorted as `i` is (every varying part begins with a zero-padded number).
    pub fn key(&self, i: u64) -> String {
        let mut k = String::with_capacity(96);
        k.push_str(&self.prefix);
        match self.shape {
            Shape::Flat => {
                let _ = write!(k, "{i:010}-{}", word(mix(self.seed ^ i), 9, 100));
            }
            Shape::Tree => {
                let (a, b, c) = (i / (FAN * FAN), (i / FAN) % FAN, i % FAN);
                let wa = word(mix(self.seed ^ 0xA ^ (a << 40)), 3, 12);
                let wb = word(mix(self.seed ^ 0xB ^ (a << 40) ^ (b << 20)), 3, 12);
                let wc = word(mix(self.seed ^ i), 6, 80);
                let _ = write!(k, "{a:03}-{wa}/{b:03}-{wb}/{c:03}-{wc}");
            }
        }
        k
    }

    /// The first index whose key is `>= key` (`n` when none): a binary search.
    pub fn lower_bound(&self, key: &str) -> u64 {
        let (mut lo, mut hi) = (0u64, self.n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key(mid).as_str() < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The size of object `i`.
    pub fn size(&self, i: u64) -> u64 {
        let lo = self.mean.saturating_sub(self.spread);
        let width = (self.mean + self.spread - lo) + 1;
        lo + mix(self.seed ^ 0x512E ^ i) % width
    }

    /// Its modification time, seconds since the epoch: within 2026.
    pub fn mtime(&self, i: u64) -> u64 {
        1_767_225_600 + mix(self.seed ^ 0x7133 ^ i) % 31_536_000
    }
}

/// The bytes of a generated version: 8-byte words of a stream seeded by (key, version), so any
/// range is made without the ones before it.
#[derive(Debug, Clone, Copy)]
pub struct Content {
    pub seed: u64,
}

impl Content {
    pub fn of(spec: &Spec, key: &str, version: u64) -> Content {
        let mut h = spec.seed ^ version.wrapping_mul(0x1000_0000_01B3);
        for b in key.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01B3);
        }
        Content { seed: mix(h) }
    }

    /// Bytes `range` of the content.
    pub fn fill(&self, start: u64, out: &mut [u8]) {
        let mut pos = start;
        let mut i = 0;
        while i < out.len() {
            let w = mix(self.seed ^ (pos / 8)).to_le_bytes();
            let off = (pos % 8) as usize;
            let n = (8 - off).min(out.len() - i);
            out[i..i + n].copy_from_slice(&w[off..off + n]);
            i += n;
            pos += n as u64;
        }
    }

    /// The MD5 of `len` bytes from `start`, read in 1 MiB pieces.
    pub fn md5(&self, start: u64, len: u64) -> [u8; 16] {
        let mut h = s3s::crypto::Md5::new();
        let mut buf = vec![0u8; (1 << 20).min(len as usize).max(1)];
        let mut pos = start;
        while pos < start + len {
            let n = buf.len().min((start + len - pos) as usize);
            self.fill(pos, &mut buf[..n]);
            h.update(&buf[..n]);
            pos += n as u64;
        }
        h.finalize()
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

/// The key just past every key that begins with `p` (for a listing that skips a common prefix).
pub fn successor(p: &str) -> String {
    let mut s: Vec<char> = p.chars().collect();
    while let Some(c) = s.pop() {
        if let Some(n) = char::from_u32(c as u32 + 1) {
            s.push(n);
            return s.into_iter().collect();
        }
    }
    String::from("\u{10FFFF}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(shape: Shape, n: u64) -> Spec {
        Spec {
            n,
            shape,
            seed: 7,
            mean: 1000,
            spread: 500,
            prefix: "data/".into(),
        }
    }

    #[test]
    fn keys_sort_as_their_indexes_and_are_20_to_120_characters() {
        for shape in [Shape::Tree, Shape::Flat] {
            let s = spec(shape, 3_000_000);
            let idx: Vec<u64> = (0..2000)
                .chain([65_535, 65_536, 65_537, 2_999_999])
                .chain((0..2000).map(|i| mix(i) % s.n))
                .collect();
            let mut sorted = idx.clone();
            sorted.sort();
            sorted.dedup();
            let keys: Vec<String> = sorted.iter().map(|i| s.key(*i)).collect();
            for w in keys.windows(2) {
                assert!(w[0] < w[1], "{shape:?}: {} !< {}", w[0], w[1]);
            }
            for k in &keys {
                let n = k.chars().count() - s.prefix.len();
                assert!((20..=120).contains(&n), "{shape:?}: {n} chars: {k}");
            }
            assert!(
                keys.iter().any(|k| !k.is_ascii()),
                "{shape:?}: some unicode"
            );
            for i in [0, 1, 255, 256, 65_536, 2_999_999] {
                assert_eq!(s.lower_bound(&s.key(i)), i);
                assert_eq!(s.lower_bound(&format!("{}\u{0}", s.key(i))), i + 1);
            }
            assert_eq!(s.lower_bound(""), 0);
            assert_eq!(s.lower_bound("\u{10FFFF}"), s.n);
        }
    }

    #[test]
    fn tree_folders_hold_256_entries() {
        let s = spec(Shape::Tree, 1 << 20);
        let folder = |i: u64| {
            let k = s.key(i);
            k[..k.rfind('/').unwrap_or(0)].to_string()
        };
        assert_eq!(folder(0), folder(255));
        assert_ne!(folder(255), folder(256));
    }

    #[test]
    fn content_ranges_agree_with_the_whole() {
        let s = spec(Shape::Flat, 10);
        let c = Content::of(&s, &s.key(3), 0);
        let mut whole = vec![0u8; 10_000];
        c.fill(0, &mut whole);
        let mut part = vec![0u8; 777];
        c.fill(1234, &mut part);
        assert_eq!(&whole[1234..1234 + 777], &part[..]);
        let mut h = s3s::crypto::Md5::new();
        h.update(&whole);
        assert_eq!(c.md5(0, 10_000), h.finalize());
        assert_ne!(Content::of(&s, &s.key(3), 1).seed, c.seed);
        for i in 0..100 {
            assert!((500..=1500).contains(&s.size(i)));
        }
    }

    #[test]
    fn successors_skip_a_prefix() {
        assert_eq!(successor("a/"), "a0");
        assert!(successor("data/001-x/").as_str() > "data/001-x/zzzz");
    }
}
