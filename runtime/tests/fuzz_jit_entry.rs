//! Property fuzzing of the JIT cache's entry decoding: a cache file is outside input (another
//! process, a full disk, a copy under the wrong name), so every byte string must decode to the
//! entry it was written as or to a [`CorruptReason`], never panic and never accept a changed file.

use std::panic::{catch_unwind, AssertUnwindSafe};

use proptest::prelude::*;
use runtime::jit::{CacheEntry, CorruptReason};

/// A cache key: 64 lower-case hex digits, as the cache makes them.
fn key() -> impl Strategy<Value = String> {
    "[0-9a-f]{64}"
}

/// A kernel name of the generated kind.
fn kernel() -> impl Strategy<Value = String> {
    "fathom_[a-z0-9_]{1,40}"
}

/// PTX-like text, with unicode and empty bodies.
fn ptx() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "\\PC{0,200}",
        "(//.*\n|\\.version 8\\.[0-9]\n|\\.target sm_[0-9]{2}\n|\t[a-z.]{2,10} %r[0-9];\n){0,20}",
    ]
}

/// One way of damaging a good file's bytes.
#[derive(Clone, Debug)]
enum Damage {
    Truncate(usize),
    Flip(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Append(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Damage::Flip(i, x)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Insert(i, b)),
        any::<usize>().prop_map(Damage::Remove),
        prop::collection::vec(any::<u8>(), 1..8).prop_map(Damage::Append),
    ]
}

/// Applies `damage`; `None` when it happens to leave the bytes as they were.
fn apply(bytes: &[u8], damage: &Damage) -> Option<Vec<u8>> {
    let mut out = bytes.to_vec();
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match damage {
        Damage::Truncate(i) => out.truncate(at(*i, bytes.len())),
        // A flip or a removal has nothing to act on once earlier damage emptied the bytes.
        Damage::Flip(_, _) | Damage::Remove(_) if out.is_empty() => {}
        Damage::Flip(i, x) => {
            let i = at(*i, out.len());
            out[i] ^= x;
        }
        Damage::Insert(i, b) => out.insert(at(*i, out.len() + 1), *b),
        Damage::Remove(i) => {
            out.remove(at(*i, out.len()));
        }
        Damage::Append(tail) => out.extend_from_slice(tail),
    }
    (out != bytes).then_some(out)
}

fn decode(bytes: &[u8], key: &str, kernel: &str) -> Result<CacheEntry, CorruptReason> {
    catch_unwind(AssertUnwindSafe(|| CacheEntry::decode(bytes, key, kernel)))
        .unwrap_or_else(|_| panic!("decode panicked on {:?}", String::from_utf8_lossy(bytes)))
}

fn check_refusal(e: &CorruptReason) {
    assert!(!e.to_string().trim().is_empty(), "{e:?} has no message");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A good entry reads back as itself.
    #[test]
    fn an_entry_round_trips(key in key(), kernel in kernel(), ptx in ptx()) {
        let entry = CacheEntry::new(key.clone(), kernel.clone(), ptx);
        prop_assert_eq!(decode(&entry.encode(), &key, &kernel), Ok(entry));
    }

    /// Any change to a good file's bytes is refused (the header names the body's hash), with
    /// one exception: a change to the body's hash may not be detectable only if it makes no
    /// change at all, which `apply` excludes.
    #[test]
    fn a_damaged_entry_is_refused(
        key in key(),
        kernel in kernel(),
        ptx in ptx(),
        damages in prop::collection::vec(damage(), 1..4),
    ) {
        let good = CacheEntry::new(key.clone(), kernel.clone(), ptx).encode();
        let mut bytes = good.clone();
        for d in &damages {
            if let Some(next) = apply(&bytes, d) {
                bytes = next;
            }
        }
        prop_assume!(bytes != good);
        match decode(&bytes, &key, &kernel) {
            Ok(entry) => prop_assert!(false, "damaged bytes accepted: {entry:?}"),
            Err(e) => check_refusal(&e),
        }
    }

    /// A good file looked up under another key or kernel is refused as such.
    #[test]
    fn an_entry_under_another_name_is_refused(
        key in key(),
        other_key in key(),
        kernel in kernel(),
        other_kernel in kernel(),
        ptx in ptx(),
    ) {
        let bytes = CacheEntry::new(key.clone(), kernel.clone(), ptx).encode();
        if other_key != key {
            let is_wrong_key = matches!(decode(&bytes, &other_key, &kernel), Err(CorruptReason::WrongKey { .. }));
            prop_assert!(is_wrong_key);
        }
        if other_kernel != kernel {
            let is_wrong_kernel = matches!(decode(&bytes, &key, &other_kernel), Err(CorruptReason::WrongKernel { .. }));
            prop_assert!(is_wrong_kernel);
        }
    }

    /// Arbitrary bytes, and headers built from near-miss fields, under arbitrary lookup names.
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..300),
            header_like().prop_map(String::into_bytes),
        ],
        key in prop_oneof![key(), "\\PC{0,10}"],
        kernel in prop_oneof![kernel(), "\\PC{0,10}"],
    ) {
        match decode(&bytes, &key, &kernel) {
            Ok(entry) => {
                // Only a file naming exactly this key and kernel, with the body's hash, is good.
                prop_assert_eq!(&entry.key, &key);
                prop_assert_eq!(&entry.kernel, &kernel);
                let header_end = bytes.iter().position(|&b| b == b'\n').unwrap();
                prop_assert_eq!(entry.ptx.as_bytes(), &bytes[header_end + 1..]);
            }
            Err(e) => check_refusal(&e),
        }
    }
}

/// Header lines made of the real field names with wrong separators, counts and values.
fn header_like() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        Just("fathom-jit-ptx".to_string()),
        Just("v1".to_string()),
        Just("v2".to_string()),
        Just("key=".to_string()),
        Just("key".to_string()),
        Just("body-sha256=".to_string()),
        Just("kernel=".to_string()),
        Just("=".to_string()),
        Just(String::new()),
        "key=[0-9a-f]{0,64}",
        "body-sha256=[0-9a-f]{64}",
        "kernel=\\PC{0,8}",
        "\\PC{0,6}",
    ];
    (
        prop::collection::vec(word, 0..8),
        prop::sample::select(vec![" ", "  ", "\t", "="]),
        prop::sample::select(vec!["\n", "", "\r\n", "\n\n"]),
        "\\PC{0,20}",
    )
        .prop_map(|(words, sep, end, body)| format!("{}{end}{body}", words.join(sep)))
}

/// The cases the fuzzing found, kept by name.
mod regressions {
    use super::*;

    #[test]
    fn a_header_of_only_a_newline_is_bad_magic() {
        assert!(matches!(
            CacheEntry::decode(b"\n", "k", "n"),
            Err(CorruptReason::BadMagic { .. })
        ));
    }
}
