//! Slurm's compressed host lists (`gpu[01-03,07],login1`) expanded, as `scontrol show hostnames`
//! does, so captured `SLURM_JOB_NODELIST` values can be read without a cluster.

/// Expands a host list; a malformed bracket is kept as one literal name.
pub fn expand(list: &str) -> Vec<String> {
    split_top(list).into_iter().flat_map(|item| expand_one(item.trim())).filter(|s| !s.is_empty()).collect()
}

/// Splits on commas outside brackets.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn expand_one(item: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (item.find('['), item.find(']')) else { return vec![item.to_string()] };
    if close < open {
        return vec![item.to_string()];
    }
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let mut heads = Vec::new();
    for r in ranges.split(',') {
        match r.split_once('-') {
            Some((a, b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
                (Ok(x), Ok(y)) if x <= y && y - x <= 100_000 => {
                    let width = a.len();
                    heads.extend((x..=y).map(|n| format!("{prefix}{n:0width$}")));
                }
                _ => return vec![item.to_string()],
            },
            None => heads.push(format!("{prefix}{r}")),
        }
    }
    // A suffix may hold another bracket (rack[1-2]-gpu[1-2]).
    let tails = if rest.is_empty() { vec![String::new()] } else { expand_one(rest) };
    heads.iter().flat_map(|h| tails.iter().map(move |t| format!("{h}{t}"))).collect()
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn ranges_lists_padding_and_suffixes_expand_like_scontrol() {
        assert_eq!(expand("n[1-2]"), ["n1", "n2"]);
        assert_eq!(expand("gpu[01-03,07],login1"), ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]);
        assert_eq!(expand("r[1-2]-g[1-2]"), ["r1-g1", "r1-g2", "r2-g1", "r2-g2"]);
        assert_eq!(expand("single"), ["single"]);
    }

    #[test]
    fn malformed_lists_stay_literal_instead_of_guessing() {
        assert_eq!(expand("n[3-1]"), ["n[3-1]"]);
        assert_eq!(expand("n[a-b]"), ["n[a-b]"]);
        assert_eq!(expand("n]x["), ["n]x["]);
    }
}
