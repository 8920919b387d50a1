//! Host memory near a GPU (issue #17): on a machine of several NUMA nodes, the pinned memory a
//! store scans over a GPU's PCIe link is allocated on the node that link hangs off, so that a
//! rank's scan does not cross the socket interconnect as well.
//!
//! The driver pins (and so places) `cuMemHostAlloc` memory when it is allocated, and the
//! registered mode's pages when they are touched, by the calling thread's memory policy. A
//! [`PreferredNode`] sets that policy to the GPU's node (`MPOL_PREFERRED`: other nodes still
//! serve when it is full) for the allocation and restores the thread's own afterwards. With
//! one node, or a GPU that names none (`CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID` below 0), nothing is
//! changed.

use std::fs;
use std::io;
use std::sync::Once;

const MPOL_PREFERRED: i32 = 1;
/// Nodes a policy mask holds: 16 words of 64, more than any Linux build's `MAX_NUMNODES`.
const MASK_WORDS: usize = 16;
const MAX_NODE: usize = MASK_WORDS * 64;

/// The number of nodes in a sysfs node list such as `0-1` or `0,2-3` (`/sys/devices/system/
/// node/online`); `None` when the text is not one.
pub fn node_count(list: &str) -> Option<usize> {
    let mut count = 0;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let n = part.parse::<usize>().ok()?;
                (n, n)
            }
        };
        if b < a {
            return None;
        }
        count += b - a + 1;
    }
    Some(count)
}

/// The NUMA nodes online on this machine (1 where sysfs does not say).
pub fn online_nodes() -> usize {
    fs::read_to_string("/sys/devices/system/node/online")
        .ok()
        .and_then(|t| node_count(&t))
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

/// The calling thread's memory policy, preferring one node until dropped.
#[derive(Debug)]
pub struct PreferredNode {
    /// The thread's policy before: mode and node mask.
    previous: Option<(i32, [u64; MASK_WORDS])>,
}

impl PreferredNode {
    /// Prefers `node` for the calling thread's allocations when the machine has several nodes
    /// and `node` is one; else changes nothing. A policy the system refuses (a container
    /// without the syscall) is one warning per process, and nothing changed.
    pub fn near(node: Option<i32>) -> PreferredNode {
        let none = PreferredNode { previous: None };
        let Some(node) = node.filter(|&n| n >= 0) else {
            return none;
        };
        if online_nodes() < 2 {
            return none;
        }
        PreferredNode::prefer(node as usize).unwrap_or_else(|e| {
            static WARNED: Once = Once::new();
            WARNED.call_once(|| {
                eprintln!(
                    "fathom: host memory is not placed on the GPU's NUMA node {node} \
                     (set_mempolicy: {e}); it goes where the kernel puts it"
                )
            });
            none
        })
    }

    /// Prefers `node` for the calling thread's allocations, whatever the machine: the policy
    /// before is restored when the value is dropped.
    pub fn prefer(node: usize) -> io::Result<PreferredNode> {
        if node >= MAX_NODE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("node {node} is past the {MAX_NODE} a mask holds"),
            ));
        }
        let previous = policy()?;
        let mut mask = [0u64; MASK_WORDS];
        mask[node / 64] |= 1u64 << (node % 64);
        set_policy(MPOL_PREFERRED, &mask)?;
        Ok(PreferredNode {
            previous: Some(previous),
        })
    }

    /// Whether the policy was changed (and will be restored).
    pub fn is_active(&self) -> bool {
        self.previous.is_some()
    }
}

impl Drop for PreferredNode {
    fn drop(&mut self) {
        if let Some((mode, mask)) = self.previous.take() {
            // The policy that was in force a moment ago is valid; nothing to report if not.
            let _ = set_policy(mode, &mask);
        }
    }
}

/// The calling thread's policy: mode and node mask (`get_mempolicy` with no address).
pub fn policy() -> io::Result<(i32, [u64; MASK_WORDS])> {
    let mut mode: i32 = 0;
    let mut mask = [0u64; MASK_WORDS];
    // SAFETY: the pointers are to locals of the sizes given (MAX_NODE bits of mask).
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut i32,
            mask.as_mut_ptr(),
            MAX_NODE as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            0 as libc::c_ulong,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((mode, mask))
}

fn set_policy(mode: i32, mask: &[u64; MASK_WORDS]) -> io::Result<()> {
    // An empty mask with the default mode is how the default is set back.
    let empty = mask.iter().all(|&w| w == 0);
    // SAFETY: the mask is MAX_NODE bits long, as the count says (the kernel reads maxnode - 1).
    let r = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            mode,
            if empty {
                std::ptr::null()
            } else {
                mask.as_ptr()
            },
            if empty {
                0
            } else {
                (MAX_NODE + 1) as libc::c_ulong
            },
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_are_counted() {
        assert_eq!(node_count("0\n"), Some(1));
        assert_eq!(node_count("0-1"), Some(2));
        assert_eq!(node_count("0,2-3"), Some(3));
        assert_eq!(node_count("0-3,8-11\n"), Some(8));
        assert_eq!(node_count("1-0"), None);
        assert_eq!(node_count("zero"), None);
        assert!(online_nodes() >= 1);
    }

    /// The policy is the preferred node while the guard lives and the thread's own after; a
    /// system that refuses the syscall (seccomp) says so with EPERM or ENOSYS, nothing else.
    #[test]
    fn a_preferred_node_is_set_and_restored() {
        let before = match policy() {
            Ok(p) => p,
            Err(e) => {
                let code = e.raw_os_error();
                assert!(matches!(code, Some(libc::EPERM | libc::ENOSYS)), "{e}");
                return;
            }
        };
        {
            let guard = PreferredNode::prefer(0).expect("node 0 exists on every machine");
            assert!(guard.is_active());
            let (mode, mask) = policy().expect("policy");
            assert_eq!(mode, MPOL_PREFERRED);
            assert_eq!(mask[0] & 1, 1, "node 0 preferred");
        }
        assert_eq!(policy().expect("policy"), before);
        assert!(PreferredNode::prefer(MAX_NODE).is_err());
        // Nothing to prefer: nothing changes.
        assert!(!PreferredNode::near(None).is_active());
        assert!(!PreferredNode::near(Some(-1)).is_active());
        assert_eq!(policy().expect("policy"), before);
    }
}
