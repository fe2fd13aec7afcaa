//! Splitting one CSV line into fields, shared by `COPY ... CSV` and the file connector.

/// Quoted fields may hold delimiters and quotes (doubled, or after `escape`); an unquoted
/// field equal to `null` is NULL.
pub fn split(
    line: &str,
    delimiter: char,
    quote: char,
    escape: char,
    null: &str,
) -> Result<Vec<Option<String>>, String> {
    let mut fields = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut in_quotes = false;
    let mut chars = line.chars().peekable();
    let finish = |value: &str, quoted: bool| {
        if !quoted && value == null {
            None
        } else {
            Some(value.to_string())
        }
    };
    while let Some(c) = chars.next() {
        if in_quotes {
            if c == escape && chars.peek() == Some(&quote) {
                // `""` (or the escape character before a quote) is one literal quote.
                chars.next();
                current.push(quote);
            } else if c == quote {
                in_quotes = false;
            } else {
                current.push(c);
            }
        } else if c == quote {
            in_quotes = true;
            quoted = true;
        } else if c == delimiter {
            fields.push(finish(&current, quoted));
            current.clear();
            quoted = false;
        } else {
            current.push(c);
        }
    }
    if in_quotes {
        return Err("unterminated CSV quoted field".into());
    }
    fields.push(finish(&current, quoted));
    Ok(fields)
}
