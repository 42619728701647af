//! The mutator: byte-level edits (flip, insert, delete, duplicate), dictionary tokens of the
//! target's format, and splices of two corpus entries, so inputs stay close to the format a
//! parser expects and reach past its first check.

use rand::rngs::StdRng;
use rand::Rng;

/// Inputs never grow past this many bytes (parsers bound their buffers; this bounds the fuzzer).
pub const MAX_LEN: usize = 64 * 1024;

/// Values that break naive numeric code, spelled as text.
const NUMBERS: [&str; 12] =
    ["0", "-1", "1e999", "-1e999", "NaN", "4294967296", "18446744073709551616", "1e-320", "9007199254740993", "2147483648", "0.0", "-0"];

/// A new input derived from `base` (and sometimes `other`) by 1 to 8 random edits.
pub fn mutate(rng: &mut StdRng, base: &[u8], other: &[u8], dict: &[&str]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..rng.gen_range(1..=8) {
        edit(rng, &mut v, other, dict);
    }
    v.truncate(MAX_LEN);
    v
}

fn edit(rng: &mut StdRng, v: &mut Vec<u8>, other: &[u8], dict: &[&str]) {
    let at = |rng: &mut StdRng, v: &Vec<u8>| if v.is_empty() { 0 } else { rng.gen_range(0..=v.len()) };
    match rng.gen_range(0..8) {
        0 if !v.is_empty() => {
            let i = rng.gen_range(0..v.len());
            v[i] ^= 1 << rng.gen_range(0..8);
        }
        1 => {
            let i = at(rng, v);
            let b: u8 = rng.gen();
            v.insert(i, b);
        }
        2 if !v.is_empty() => {
            let i = rng.gen_range(0..v.len());
            let n = rng.gen_range(1..=16.min(v.len() - i));
            v.drain(i..i + n);
        }
        3 if !v.is_empty() => {
            let i = rng.gen_range(0..v.len());
            let n = rng.gen_range(1..=64.min(v.len() - i));
            let piece = v[i..i + n].to_vec();
            let j = at(rng, v);
            v.splice(j..j, piece.iter().copied().cycle().take(n * rng.gen_range(1..=4)));
        }
        4 if !dict.is_empty() => {
            let i = at(rng, v);
            let t = dict[rng.gen_range(0..dict.len())].as_bytes();
            v.splice(i..i, t.iter().copied());
        }
        5 => replace_number(rng, v),
        6 if !other.is_empty() => {
            let cut = at(rng, v);
            let from = rng.gen_range(0..other.len());
            v.truncate(cut);
            v.extend_from_slice(&other[from..]);
        }
        _ => {
            let i = at(rng, v);
            let b = [b'\n', b'\r', b'"', b'{', b'}', b'[', b']', b':', b',', 0u8, 0xff][rng.gen_range(0..11)];
            v.insert(i, b);
        }
    }
}

/// Swaps the first run of ASCII digits at or after a random place for an awkward number.
fn replace_number(rng: &mut StdRng, v: &mut Vec<u8>) {
    if v.is_empty() {
        return;
    }
    let start = rng.gen_range(0..v.len());
    let Some(i) = (start..v.len()).find(|&i| v[i].is_ascii_digit()) else { return };
    let j = (i..v.len()).find(|&j| !v[j].is_ascii_digit()).unwrap_or(v.len());
    let n = NUMBERS[rng.gen_range(0..NUMBERS.len())];
    v.splice(i..j, n.bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn mutation_changes_the_input_and_respects_the_size_bound() {
        let mut rng = StdRng::seed_from_u64(7);
        let base = b"data: {\"x\": 12}\n\n".to_vec();
        let changed = (0..100).filter(|_| mutate(&mut rng, &base, b"other", &["data:"]) != base).count();
        assert!(changed > 90, "only {changed} of 100 mutations changed the input");
        let big = vec![b'1'; MAX_LEN];
        assert!((0..50).all(|_| mutate(&mut rng, &big, &big, &[]).len() <= MAX_LEN));
    }
}
