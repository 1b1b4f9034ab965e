//! The compute pool: how many threads the forward passes run on.

/// Sets the size of the rayon pool candle computes on. `None` uses the physical core count
/// (hyper-threads share the vector units, so more threads than cores only adds contention).
/// Returns the number of threads in use; a pool that was already built keeps its size.
pub fn init_threads(threads: Option<usize>) -> usize {
    let n = threads.unwrap_or_else(physical_cores).max(1);
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
    {
        Ok(()) => n,
        Err(_) => rayon::current_num_threads(),
    }
}

/// Physical cores from `/proc/cpuinfo` (distinct physical id × core id), falling back to the
/// available parallelism.
pub fn physical_cores() -> usize {
    let fallback = || std::thread::available_parallelism().map_or(1, |n| n.get());
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return fallback();
    };
    let mut cores = std::collections::HashSet::new();
    let mut physical = "";
    for line in info.lines() {
        let mut kv = line.splitn(2, ':').map(str::trim);
        match (kv.next(), kv.next()) {
            (Some("physical id"), Some(v)) => physical = v,
            (Some("core id"), Some(v)) => {
                cores.insert((physical.to_string(), v.to_string()));
            }
            _ => {}
        }
    }
    if cores.is_empty() {
        fallback()
    } else {
        cores.len().min(fallback())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn physical_cores_is_positive() {
        assert!(physical_cores() >= 1);
    }
}
