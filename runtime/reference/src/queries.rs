//! The one check every query group passes before it is planned or scored: each of its queries
//! has the store's `D` channels, all finite. Callers turn a [`QueryFault`] into their own error.

/// What is wrong with a query group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QueryFault {
    /// Query `head` has `got` channels; the store has `want`.
    Shape {
        head: usize,
        got: usize,
        want: usize,
    },
    /// Query `head` holds a non-finite value at `channel`.
    NonFinite {
        head: usize,
        channel: usize,
        value: f64,
    },
}

/// Checks every query of a group against a `d`-channel store.
pub fn check_queries(queries: &[Vec<f64>], d: usize) -> Result<(), QueryFault> {
    for (head, q) in queries.iter().enumerate() {
        if q.len() != d {
            return Err(QueryFault::Shape {
                head,
                got: q.len(),
                want: d,
            });
        }
        if let Some(channel) = q.iter().position(|x| !x.is_finite()) {
            return Err(QueryFault::NonFinite {
                head,
                channel,
                value: q[channel],
            });
        }
    }
    Ok(())
}
