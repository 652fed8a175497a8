//! Fitting a channel's cost model T(n) = L + n/B to measured (bytes, seconds) points.
//!
//! Points span six orders of magnitude in n (64 B .. 256 MiB), so an ordinary least-squares
//! fit would be decided by the largest payloads alone. We minimise the *relative* error
//! instead (weights 1/T²), which lets the small payloads fix L and the large ones fix B.

use serde::Serialize;

/// The fitted model of one channel.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fit {
    /// Fixed cost per transfer (s).
    pub latency_s: f64,
    /// Asymptotic bandwidth (bytes/s); infinite when the time did not grow with n.
    pub bandwidth_bps: f64,
    /// Payload at which half of the asymptotic bandwidth is reached: n½ = L·B (bytes).
    pub n_half_bytes: f64,
    /// Median relative error of the model over the points.
    pub median_rel_error: f64,
}

impl Fit {
    /// Predicted time for `n` bytes.
    pub fn time_s(&self, n: f64) -> f64 {
        self.latency_s + if self.bandwidth_bps.is_finite() { n / self.bandwidth_bps } else { 0.0 }
    }
}

/// Weighted least squares of T = a + b·n with weights 1/T²; `a` and `b` clamped at 0 (a
/// negative latency or bandwidth has no meaning: the clamp refits the other parameter alone).
/// Returns `None` for fewer than two points with distinct n or non-positive times.
pub fn fit(points: &[(f64, f64)]) -> Option<Fit> {
    let pts: Vec<(f64, f64)> = points.iter().copied().filter(|&(n, t)| n >= 0.0 && t > 0.0).collect();
    let distinct = pts.iter().any(|p| p.0 != pts[0].0);
    if pts.len() < 2 || !distinct {
        return None;
    }
    let w = |t: f64| 1.0 / (t * t);
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(n, t) in &pts {
        let wi = w(t);
        sw += wi;
        sx += wi * n;
        sy += wi * t;
        sxx += wi * n * n;
        sxy += wi * n * t;
    }
    let det = sw * sxx - sx * sx;
    let (mut a, mut b) = if det.abs() > f64::MIN_POSITIVE {
        ((sy * sxx - sx * sxy) / det, (sw * sxy - sx * sy) / det)
    } else {
        (sy / sw, 0.0)
    };
    if a < 0.0 {
        // Through the origin: b = Σw·n·t / Σw·n².
        a = 0.0;
        b = sxy / sxx;
    }
    if b <= 0.0 {
        b = 0.0;
        a = sy / sw;
    }
    let bandwidth_bps = if b > 0.0 { 1.0 / b } else { f64::INFINITY };
    let mut errs: Vec<f64> = pts.iter().map(|&(n, t)| ((a + b * n) - t).abs() / t).collect();
    errs.sort_by(f64::total_cmp);
    let median_rel_error = errs[errs.len() / 2];
    Some(Fit { latency_s: a, bandwidth_bps, n_half_bytes: a * bandwidth_bps, median_rel_error })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn exact_points_give_back_the_model() {
        let (l, bw) = (2e-6, 5e9);
        let pts: Vec<(f64, f64)> = (6..28).map(|k| (f64::from(1u32 << k), l + f64::from(1u32 << k) / bw)).collect();
        let f = fit(&pts).unwrap();
        assert!((f.latency_s - l).abs() / l < 1e-6, "{f:?}");
        assert!((f.bandwidth_bps - bw).abs() / bw < 1e-6, "{f:?}");
        assert!((f.n_half_bytes - l * bw).abs() / (l * bw) < 1e-6);
        assert!(f.median_rel_error < 1e-9);
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(fit(&[]), None);
        assert_eq!(fit(&[(64.0, 1e-6)]), None);
        assert_eq!(fit(&[(64.0, 1e-6), (64.0, 2e-6)]), None);
        // flat times: pure latency, infinite bandwidth
        let f = fit(&[(64.0, 1e-6), (4096.0, 1e-6), (1e6, 1e-6)]).unwrap();
        assert!(f.bandwidth_bps.is_infinite() && (f.latency_s - 1e-6).abs() < 1e-12);
        // proportional times: zero latency
        let f = fit(&[(1e3, 1e-6), (1e6, 1e-3)]).unwrap();
        assert!(f.latency_s.abs() < 1e-12 && (f.bandwidth_bps - 1e9).abs() < 1.0);
    }

    proptest! {
        /// With ±5% noise the fit stays within 25% on both parameters, and never goes negative.
        #[test]
        fn noisy_points_fit_close(l in 1e-7f64..1e-3, bw in 1e8f64..1e11, seed in any::<u64>()) {
            let mut x = seed | 1;
            let mut noise = || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; 1.0 + ((x % 1000) as f64 / 1000.0 - 0.5) * 0.1 };
            let pts: Vec<(f64, f64)> = (6..29).map(|k| { let n = f64::from(1u32 << k); (n, (l + n / bw) * noise()) }).collect();
            let f = fit(&pts).unwrap();
            prop_assert!(f.latency_s >= 0.0 && f.bandwidth_bps > 0.0);
            prop_assert!((f.bandwidth_bps - bw).abs() / bw < 0.25, "{:?} vs bw {}", f, bw);
            // L is only identifiable if some payloads are latency-bound
            if l * bw > 4096.0 {
                prop_assert!((f.latency_s - l).abs() / l < 0.25, "{:?} vs l {}", f, l);
            }
            prop_assert!(f.median_rel_error < 0.1);
        }
    }
}
