//! Kubernetes quantities ("4Gi", "512M", "1.5e9") as byte counts.

/// The number of bytes `text` stands for, rounded up to a whole byte as Kubernetes does for
/// memory, or why it is not a quantity. Negative quantities and values beyond `u64` are
/// refused.
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let invalid = || format!("{text:?} is not a quantity such as 4Gi, 512Mi or 1G");
    let unsigned = text.strip_prefix('+').unwrap_or(text);
    if unsigned.starts_with('-') {
        return Err(format!("{text:?} is negative"));
    }
    let number_len = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(invalid());
    }

    // value = digits / 10^fraction.len() * 2^binary * 10^decimal
    let (binary, decimal): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        exponent => {
            // i32's parser takes the exponent's optional sign as it is.
            let exponent = exponent.strip_prefix(['e', 'E']).ok_or_else(invalid)?;
            (0, exponent.parse::<i32>().map_err(|_| invalid())?)
        }
    };

    let too_big = || format!("{text:?} is more bytes than fit in 64 bits");
    // Trailing zeros of the fraction change nothing but the number of digits to hold.
    let fraction = fraction.trim_end_matches('0');
    let digits: u128 = format!("{whole}{fraction}")
        .trim_start_matches('0')
        .parse()
        .or_else(|err: std::num::ParseIntError| {
            if *err.kind() == std::num::IntErrorKind::Empty {
                Ok(0)
            } else {
                Err(too_big())
            }
        })?;
    let scale = decimal - i32::try_from(fraction.len()).map_err(|_| invalid())?;
    let pow10 = |exp: i32| 10u128.checked_pow(exp.unsigned_abs()).ok_or_else(too_big);
    let numerator = digits.checked_shl(binary).ok_or_else(too_big)?;
    let bytes = if digits == 0 {
        0
    } else if scale >= 0 {
        numerator.checked_mul(pow10(scale)?).ok_or_else(too_big)?
    } else {
        match pow10(scale) {
            Ok(denominator) => numerator.div_ceil(denominator),
            // Smaller than any denominator we can hold: a positive fraction of a byte.
            Err(_) => 1,
        }
    };
    u64::try_from(bytes).map_err(|_| too_big())
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn quantities() {
        let cases: &[(&str, Result<u64, &str>)] = &[
            ("4Gi", Ok(4 << 30)),
            ("512Mi", Ok(512 << 20)),
            ("1.5Gi", Ok(3 << 29)),
            ("1Ki", Ok(1024)),
            ("1Ei", Ok(1 << 60)),
            ("1G", Ok(1_000_000_000)),
            ("1k", Ok(1000)),
            ("2.5M", Ok(2_500_000)),
            ("1e9", Ok(1_000_000_000)),
            ("1E3", Ok(1000)),
            ("1e+3", Ok(1000)),
            ("15e-1", Ok(2)),
            ("123", Ok(123)),
            ("+7", Ok(7)),
            ("0", Ok(0)),
            ("0.0Gi", Ok(0)),
            ("0010", Ok(10)),
            (".5Ki", Ok(512)),
            ("1.", Ok(1)),
            ("1.0000000000000000000000000000000000000000000Ki", Ok(1024)),
            ("100m", Ok(1)),
            ("1n", Ok(1)),
            ("1e-40", Ok(1)),
            ("1500m", Ok(2)),
            ("16Ei", Err("64 bits")),
            ("1e30", Err("64 bits")),
            ("99999999999999999999999999999999999999999", Err("64 bits")),
            ("-1Gi", Err("negative")),
            ("", Err("not a quantity")),
            ("Gi", Err("not a quantity")),
            (".", Err("not a quantity")),
            ("1.2.3", Err("not a quantity")),
            ("4 Gi", Err("not a quantity")),
            ("4GB", Err("not a quantity")),
            ("4gi", Err("not a quantity")),
            ("1e", Err("not a quantity")),
            ("1ex", Err("not a quantity")),
        ];
        for (text, expected) in cases {
            match (parse_bytes(text), expected) {
                (Ok(bytes), Ok(want)) => assert_eq!(bytes, *want, "{text}"),
                (Err(err), Err(needle)) => assert!(err.contains(needle), "{text}: {err}"),
                (got, _) => panic!("{text}: expected {expected:?}, got {got:?}"),
            }
        }
    }
}
