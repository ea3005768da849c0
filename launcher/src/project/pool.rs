//! The server-wide bound on the sessions' layers (`NIX_SANDBOX_LAYERS_MB`,
//! docs/sessions.md): each session jail's layer is a tmpfs of its
//! environment's `workspace_mb`, memory that nothing else bounds in all.
//! A jail reserves its layer's size from the [`Pool`] before it starts
//! ([`Pool::reserve`]); the [`Reservation`] gives it back when dropped,
//! with its layer (an `Arc`, so whatever keeps a layer's tmpfs alive can
//! hold its reservation as long).

use std::fmt;
use std::sync::{Arc, Mutex};

/// The bound and what is reserved of it. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Pool {
    total: u64,
    held: Mutex<Held>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Held {
    bytes: u64,
    layers: u64,
}

/// Bytes of the pool held for one layer, given back on drop.
#[derive(Debug)]
pub struct Reservation {
    pool: Arc<Pool>,
    bytes: u64,
}

/// A layer that does not fit: its size, the bound, and what holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Full {
    pub wanted: u64,
    pub total: u64,
    pub held: u64,
    pub layers: u64,
}

impl Pool {
    /// A pool of `total` bytes.
    pub fn new(total: u64) -> Arc<Self> {
        Arc::new(Self {
            total,
            held: Mutex::default(),
        })
    }

    /// The bound, in bytes.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Holds `bytes` for one layer, or says why not.
    pub fn reserve(self: &Arc<Self>, bytes: u64) -> Result<Reservation, Full> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.bytes.saturating_add(bytes) > self.total {
            return Err(Full {
                wanted: bytes,
                total: self.total,
                held: held.bytes,
                layers: held.layers,
            });
        }
        held.bytes += bytes;
        held.layers += 1;
        Ok(Reservation {
            pool: Arc::clone(self),
            bytes,
        })
    }

    /// Bytes held now, and by how many layers.
    #[cfg(test)]
    pub fn held(&self) -> (u64, u64) {
        let held = *self.held.lock().unwrap_or_else(|p| p.into_inner());
        (held.bytes, held.layers)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut held = self.pool.held.lock().unwrap_or_else(|p| p.into_inner());
        held.bytes -= self.bytes;
        held.layers -= 1;
    }
}

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b.div_ceil(1 << 20);
        write!(
            f,
            "the session's layer ({} MiB, its environment's workspace_mb) does not fit in the \
             server's bound on all layers, NIX_SANDBOX_LAYERS_MB ({} MiB): {} open session \
             layers hold {} MiB of it",
            mib(self.wanted),
            mib(self.total),
            self.layers,
            mib(self.held)
        )
    }
}

/// This machine's memory (`MemTotal` of /proc/meminfo), the default
/// bound: a layer's size is a ceiling its session fills only as it writes
/// (and, with a cgroup, within its `memory_mb`), so the bound keeps the
/// ceilings together within what the machine has; a smaller share would
/// refuse the default 32 sessions of 512 MiB on a machine of 24 GiB.
/// `None` when it cannot be read.
pub fn default_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_fit_the_bound_and_are_given_back() {
        let pool = Pool::new(100);
        let a = pool.reserve(60).unwrap();
        let shared = Arc::new(pool.reserve(40).unwrap());
        assert_eq!(pool.held(), (100, 2));
        let full = pool.reserve(1).unwrap_err();
        assert_eq!(
            full,
            Full {
                wanted: 1,
                total: 100,
                held: 100,
                layers: 2
            }
        );
        drop(a);
        let kept = Arc::clone(&shared);
        drop(shared);
        // Held as long as any holder keeps it.
        assert_eq!(pool.held(), (40, 1));
        assert!(pool.reserve(61).is_err());
        let b = pool.reserve(60).unwrap();
        drop((kept, b));
        assert_eq!(pool.held(), (0, 0));
    }

    #[test]
    fn the_default_is_memtotal() {
        let total = default_bytes().expect("/proc/meminfo has MemTotal");
        assert!(total > 1 << 20, "{total}");
    }

    #[test]
    fn full_names_the_setting_and_the_holders() {
        let line = Full {
            wanted: 64 << 20,
            total: 100 << 20,
            held: 80 << 20,
            layers: 3,
        }
        .to_string();
        assert!(line.contains("NIX_SANDBOX_LAYERS_MB (100 MiB)"), "{line}");
        assert!(line.contains("3 open session layers hold 80 MiB"), "{line}");
    }
}
