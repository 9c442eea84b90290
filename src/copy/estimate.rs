//! `slate copy --estimate`: what a copy would cost, from a listing alone. Counts objects,
//! bytes and the requests the copier would make, and prices them with a documented table
//! (list prices, first tier) that the config file can override.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::transfer::chunks;
use crate::core::location::Scheme;

/// Prices in US dollars. Defaults are public list prices (first tier, standard storage class,
/// internet egress) as of 2026; regions and contracts differ, so override them in the config.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// Egress per GiB by `"SRC->DST"` with SRC, DST in `s3`, `az`, `gs`, `local`.
    /// Missing pairs fall back to `egress_default_per_gib[SRC]` (leaving SRC's cloud).
    #[serde(default)]
    pub egress_per_gib: BTreeMap<String, f64>,
    /// Egress per GiB when data leaves a cloud for anywhere else, by source.
    #[serde(default = "default_egress")]
    pub egress_default_per_gib: BTreeMap<String, f64>,
    /// Price of 1,000 write-class requests (PUT, COPY, LIST, multipart calls), by store.
    #[serde(default = "default_write")]
    pub write_per_1000: BTreeMap<String, f64>,
    /// Price of 1,000 read-class requests (GET, HEAD), by store.
    #[serde(default = "default_read")]
    pub read_per_1000: BTreeMap<String, f64>,
}

fn default_egress() -> BTreeMap<String, f64> {
    // AWS S3 internet egress $0.09/GB, Azure $0.087/GB, GCS premium tier $0.12/GB.
    [("s3", 0.09), ("az", 0.087), ("gs", 0.12), ("local", 0.0)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

fn default_write() -> BTreeMap<String, f64> {
    // S3 PUT/COPY/LIST $0.005/1k, Azure hot write $0.065/10k, GCS class A $0.005/1k.
    [("s3", 0.005), ("az", 0.0065), ("gs", 0.005), ("local", 0.0)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

fn default_read() -> BTreeMap<String, f64> {
    // S3 GET $0.0004/1k, Azure hot read $0.005/10k, GCS class B $0.0004/1k.
    [
        ("s3", 0.0004),
        ("az", 0.0005),
        ("gs", 0.0004),
        ("local", 0.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            egress_per_gib: BTreeMap::new(),
            egress_default_per_gib: default_egress(),
            write_per_1000: default_write(),
            read_per_1000: default_read(),
        }
    }
}

impl Prices {
    /// Egress price per GiB from `src` to `dst`. Within one cloud it is taken as free (same
    /// region); say otherwise with an `egress_per_gib` entry such as `"s3->s3" = 0.02`.
    pub fn egress(&self, src: Scheme, dst: Scheme) -> f64 {
        let key = format!("{}->{}", src.short(), dst.short());
        if let Some(p) = self.egress_per_gib.get(&key) {
            return *p;
        }
        if src == dst || src == Scheme::Local {
            return 0.0;
        }
        self.egress_default_per_gib
            .get(src.short())
            .copied()
            .unwrap_or(0.0)
    }
}

/// The tally of an estimate.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Estimate {
    pub objects: u64,
    pub bytes: u64,
    pub list_requests: u64,
    pub read_requests: u64,
    pub write_requests: u64,
}

/// Objects per listing page, by store.
fn page_size(s: Scheme) -> u64 {
    match s {
        Scheme::Azure => 5000,
        Scheme::Local => u64::MAX,
        _ => 1000,
    }
}

impl Estimate {
    /// Adds one object as the copier would move it.
    pub fn add(&mut self, size: u64, chunk: u64, server_side: bool, src: Scheme, dst: Scheme) {
        self.objects += 1;
        self.bytes += size;
        if server_side {
            self.write_requests += 1;
            return;
        }
        let n = chunks(size, chunk).len().max(1) as u64;
        if src != Scheme::Local && size > 0 {
            self.read_requests += n;
        }
        if dst != Scheme::Local {
            // one PUT, or create + parts + complete
            self.write_requests += if n == 1 { 1 } else { n + 2 };
        }
    }

    pub fn finish_listing(&mut self, src: Scheme) {
        if src != Scheme::Local {
            self.list_requests = self.objects.div_ceil(page_size(src)).max(1);
        }
    }

    /// (egress, requests) cost in dollars.
    pub fn cost(&self, p: &Prices, src: Scheme, dst: Scheme, server_side: bool) -> (f64, f64) {
        let gib = self.bytes as f64 / (1u64 << 30) as f64;
        let egress = if server_side {
            0.0
        } else {
            gib * p.egress(src, dst)
        };
        let price = |m: &BTreeMap<String, f64>, s: Scheme| m.get(s.short()).copied().unwrap_or(0.0);
        let src_reads = (self.read_requests as f64) * price(&p.read_per_1000, src) / 1000.0;
        let src_lists = (self.list_requests as f64) * price(&p.write_per_1000, src) / 1000.0;
        let dst_writes = (self.write_requests as f64) * price(&p.write_per_1000, dst) / 1000.0;
        (egress, src_reads + src_lists + dst_writes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const MIB: u64 = 1 << 20;

    #[test]
    fn counts_requests_like_the_copier() {
        let mut e = Estimate::default();
        e.add(10 * MIB, 64 * MIB, false, Scheme::S3, Scheme::Gcs); // GET + PUT
        e.add(200 * MIB, 64 * MIB, false, Scheme::S3, Scheme::Gcs); // 4 GETs, 1+4+1 writes
        e.add(0, 64 * MIB, false, Scheme::S3, Scheme::Gcs); // no GET, one PUT
        e.finish_listing(Scheme::S3);
        assert_eq!(
            (
                e.objects,
                e.list_requests,
                e.read_requests,
                e.write_requests
            ),
            (3, 1, 5, 8)
        );
        let mut e = Estimate::default();
        e.add(5 * MIB, 64 * MIB, true, Scheme::S3, Scheme::S3);
        assert_eq!((e.read_requests, e.write_requests), (0, 1));
        let mut e = Estimate::default();
        e.add(5 * MIB, 64 * MIB, false, Scheme::Local, Scheme::Local);
        e.finish_listing(Scheme::Local);
        assert_eq!(
            (e.list_requests, e.read_requests, e.write_requests),
            (0, 0, 0)
        );
    }

    #[test]
    fn prices_egress_by_pair_with_overrides() {
        let mut p = Prices::default();
        assert_eq!(p.egress(Scheme::S3, Scheme::Gcs), 0.09);
        assert_eq!(p.egress(Scheme::Gcs, Scheme::Local), 0.12);
        assert_eq!(p.egress(Scheme::Local, Scheme::S3), 0.0);
        assert_eq!(p.egress(Scheme::S3, Scheme::S3), 0.0);
        p.egress_per_gib.insert("s3->s3".into(), 0.02);
        assert_eq!(p.egress(Scheme::S3, Scheme::S3), 0.02);
        let mut e = Estimate::default();
        e.add(1 << 30, 64 * MIB, false, Scheme::S3, Scheme::Gcs);
        e.finish_listing(Scheme::S3);
        let (egress, req) = e.cost(&Prices::default(), Scheme::S3, Scheme::Gcs, false);
        assert!((egress - 0.09).abs() < 1e-9);
        assert!(req > 0.0 && req < 0.001, "{req}");
    }
}
