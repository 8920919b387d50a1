//! The status log of the store's launches and [`KeyStore::check`], which reads it.

use super::*;

impl KeyStore {
    /// Records a launch of `ids` at `layer` in the status log and returns its status words'
    /// address.
    pub(super) fn log_status(&self, layer: usize, ids: &[SequenceId], index: bool) -> u64 {
        let slot = {
            let mut shared = self.lock();
            shared.log.push(LaunchRecord {
                layer,
                ids: ids.to_vec(),
                index,
            });
            shared.log.len() - 1
        };
        self.status_log.addr() + (slot * STATUS_WORDS * 4) as u64
    }

    /// Reads the status of every append encode (and ParisKV index build) since the last check
    /// (a host synchronisation) and returns the first failure: a non-finite key (sequence,
    /// layer, KV head, token, raw channel) or a scale overflow (the block's first token, store
    /// channel); with the index, also a non-finite tail key or a weight overflow (sequence,
    /// layer, KV head, token). The block or token that failed was not written; free its
    /// sequence.
    pub fn check(&self) -> Result<(), StoreError> {
        let mut shared = self.lock();
        if shared.log.is_empty() {
            return Ok(());
        }
        let words = shared.log.len() * STATUS_WORDS;
        let status: Vec<i32> = device::read_back(&self.gpu, self.status_log.addr(), words)?;
        let failure = shared
            .log
            .iter()
            .zip(status.chunks_exact(STATUS_WORDS))
            .find_map(|(record, status)| {
                if record.index {
                    index_status_error(status, record.layer, &record.ids)
                } else {
                    status_error(status, record.layer, &record.ids)
                }
            });
        device::zero(&self.gpu, self.status_log.addr(), words * 4)?;
        shared.log.clear();
        failure.map_or(Ok(()), Err)
    }
}

/// The failure an encode status word `{kind, b, h, token, channel}` reports, if any.
pub(super) fn status_error(status: &[i32], layer: usize, ids: &[SequenceId]) -> Option<StoreError> {
    let [kind, b, head, token, channel] = [0, 1, 2, 3, 4].map(|i| status[i]);
    if kind == 0 {
        return None;
    }
    let Some(&sequence) = usize::try_from(b).ok().and_then(|b| ids.get(b)) else {
        return Some(StoreError::Internal(format!(
            "encode status {status:?} names batch entry {b} of a batch of {}",
            ids.len()
        )));
    };
    let (head, token, channel) = (head as usize, token as usize, channel as usize);
    Some(match kind {
        1 => StoreError::NonFiniteKey {
            sequence,
            layer,
            head,
            token,
            channel,
        },
        2 => StoreError::ScaleOverflow {
            sequence,
            layer,
            head,
            token,
            channel,
        },
        3 => StoreError::Internal(format!(
            "encode of {sequence}, layer {layer}, head {head}, token {token} found no segment"
        )),
        _ => StoreError::Internal(format!(
            "encode of {sequence}, layer {layer}, head {head} got a range starting at token \
             {token}, not on a block boundary (status kind {kind})"
        )),
    })
}
