//! Phone numbers in E.164: `+`, then 7 to 15 digits, the first not 0. Parsed once where a
//! number enters the system (the API), and carried as a [`PhoneNumber`] from there on.

use std::fmt;

/// A phone number in E.164 form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PhoneNumber(String);

/// Why a text is not an E.164 number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotE164;

impl fmt::Display for NotE164 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("must be an E.164 number such as +15550001111")
    }
}

impl PhoneNumber {
    /// Parses `text` as E.164.
    pub fn parse(text: &str) -> Result<Self, NotE164> {
        let digits = text.strip_prefix('+').ok_or(NotE164)?;
        let valid =
            (7..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
        if valid {
            Ok(PhoneNumber(text.to_owned()))
        } else {
            Err(NotE164)
        }
    }

    /// The number as text (`+15550001111`).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PhoneNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn e164_numbers_and_the_ways_to_be_wrong() {
        for good in ["+15550001111", "+4915112345678", "+1234567", "+123456789012345"] {
            assert_eq!(PhoneNumber::parse(good).map(|n| n.to_string()), Ok(good.to_owned()));
        }
        for bad in [
            "",
            "+",
            "15550001111",
            "+0555000111",
            "+123456",
            "+1234567890123456",
            "+1555 000 1111",
            "+1555000111a",
            "++15550001111",
        ] {
            assert_eq!(PhoneNumber::parse(bad), Err(NotE164), "{bad}");
        }
    }
}
