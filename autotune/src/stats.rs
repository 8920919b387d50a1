//! Summary statistics of repeated timings.

/// The quartiles of a set of timings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub p25: f64,
    pub median: f64,
    pub p75: f64,
    pub samples: usize,
}

impl Spread {
    /// Quartiles of `samples` (linear interpolation between order statistics); `None` when
    /// there are none or one is not a finite positive time.
    pub fn of(samples: &[f64]) -> Option<Spread> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite() || *s <= 0.0) {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| {
            let x = p * (v.len() - 1) as f64;
            let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
            v[lo] + (v[hi] - v[lo]) * (x - lo as f64)
        };
        Some(Spread {
            p25: q(0.25),
            median: q(0.5),
            p75: q(0.75),
            samples: v.len(),
        })
    }

    /// The interquartile range relative to the median: the measurement's own noise.
    pub fn relative(&self) -> f64 {
        (self.p75 - self.p25) / self.median
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_of_known_sets() {
        let s = Spread::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.p25, s.median, s.p75, s.samples), (2.0, 3.0, 4.0, 5));
        assert!((s.relative() - 2.0 / 3.0).abs() < 1e-12);
        let even = Spread::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(even.median, 2.5);
        assert_eq!(Spread::of(&[2.0]).unwrap().relative(), 0.0);
    }

    #[test]
    fn no_or_bad_samples_have_no_spread() {
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, f64::NAN]), None);
        assert_eq!(Spread::of(&[1.0, 0.0]), None);
    }
}
