//! Text helpers every database's statements share. A leaf: it imports nothing of the crate, so
//! `sql.rs` (the dialect-neutral statements) and each `backend/<database>/` may both use it.

/// Rewrites `?` placeholders as PostgreSQL's `$1, $2, …`. Our SQL has no `?` in literals.
pub(crate) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// Escapes a name prefix for `LIKE … ESCAPE '!'` and appends the `%` wildcard.
pub(crate) fn like_prefix(prefix: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + 2);
    for c in prefix.chars() {
        if matches!(c, '!' | '%' | '_') {
            s.push('!');
        }
        s.push(c);
    }
    s.push('%');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_placeholders() {
        assert_eq!(numbered("a = ? AND b = ?"), "a = $1 AND b = $2");
    }

    #[test]
    fn escapes_like_wildcards() {
        assert_eq!(like_prefix("a%b_c!d\\e"), "a!%b!_c!!d\\e%");
    }
}
