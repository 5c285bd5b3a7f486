//! SMS segment counting: what one message costs.
//!
//! Text that fits the GSM-7 alphabet is sent as 7-bit septets: 160 in a single segment, 153 per
//! segment when split (the user data header takes the rest). Characters of the GSM-7 extension
//! table (`^{}\[~]|€` and form feed) take two septets, and an escape pair is never split across
//! segments. Any other character switches the whole message to UCS-2: 70 UTF-16 code units in a
//! single segment, 67 per segment when split, and a surrogate pair is never split.

crate::text_enum! {
    /// How a message's text is encoded on the air.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Encoding {
        /// The GSM 03.38 7-bit default alphabet (with its extension table).
        Gsm7 = "GSM-7",
        /// UCS-2 / UTF-16.
        Ucs2 = "UCS-2",
    }
}

impl Encoding {
    fn limits(self) -> (u32, u32) {
        match self {
            Encoding::Gsm7 => (160, 153),
            Encoding::Ucs2 => (70, 67),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Encoding {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Encoding::from_name(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown encoding {name}")))
    }
}

/// The segment count of one text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segments {
    /// The encoding the text needs.
    pub encoding: Encoding,
    /// Septets (GSM-7) or UTF-16 code units (UCS-2).
    pub units: u32,
    /// Segments billed: at least 1, even for an empty text.
    pub count: u32,
}

const GSM7_BASIC: &str = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?\
¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";
const GSM7_EXTENSION: &str = "^{}\\[~]|€\u{000C}";

/// Septets a character takes in GSM-7, or `None` if it is not in the alphabet.
fn gsm7_septets(c: char) -> Option<u32> {
    if GSM7_BASIC.contains(c) {
        Some(1)
    } else if GSM7_EXTENSION.contains(c) {
        Some(2)
    } else {
        None
    }
}

/// Counts the segments of `text`.
pub fn count(text: &str) -> Segments {
    let gsm: Option<Vec<u32>> = text.chars().map(gsm7_septets).collect();
    let (encoding, widths) = match gsm {
        Some(widths) => (Encoding::Gsm7, widths),
        None => (Encoding::Ucs2, text.chars().map(|c| c.len_utf16() as u32).collect()),
    };
    let units: u32 = widths.iter().sum();
    let (single, per_part) = encoding.limits();
    let count = if units <= single {
        1
    } else {
        // Fill parts greedily; a character that does not fit whole starts the next part.
        let mut parts = 1;
        let mut used = 0;
        for w in widths {
            if used + w > per_part {
                parts += 1;
                used = 0;
            }
            used += w;
        }
        parts
    };
    Segments { encoding, units, count }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn seg(text: &str) -> (Encoding, u32, u32) {
        let s = count(text);
        (s.encoding, s.units, s.count)
    }

    #[test]
    fn an_encoding_reads_back_from_its_stored_name() {
        for e in [Encoding::Gsm7, Encoding::Ucs2] {
            assert_eq!(Encoding::from_name(e.as_str()), Some(e));
        }
        assert_eq!(Encoding::from_name("gsm-7"), None);
    }

    #[test]
    fn gsm7_boundaries() {
        assert_eq!(seg(""), (Encoding::Gsm7, 0, 1));
        assert_eq!(seg("hello"), (Encoding::Gsm7, 5, 1));
        assert_eq!(seg(&"a".repeat(160)), (Encoding::Gsm7, 160, 1));
        assert_eq!(seg(&"a".repeat(161)), (Encoding::Gsm7, 161, 2));
        assert_eq!(seg(&"a".repeat(306)), (Encoding::Gsm7, 306, 2));
        assert_eq!(seg(&"a".repeat(307)), (Encoding::Gsm7, 307, 3));
    }

    #[test]
    fn gsm7_extension_counts_twice_and_is_never_split() {
        assert_eq!(seg("€"), (Encoding::Gsm7, 2, 1));
        assert_eq!(seg(&"{".repeat(80)), (Encoding::Gsm7, 160, 1));
        assert_eq!(seg(&"{".repeat(81)), (Encoding::Gsm7, 162, 2));
        // 152 septets, then an escape pair that would straddle the 153 boundary.
        let text = format!("{}€{}", "a".repeat(152), "a".repeat(10));
        assert_eq!(seg(&text), (Encoding::Gsm7, 164, 2));
        let text = format!("{}€{}", "a".repeat(152), "a".repeat(151));
        assert_eq!(seg(&text), (Encoding::Gsm7, 305, 2), "part 2 holds the pair and 151 septets exactly");
        let text = format!("{}€{}", "a".repeat(152), "a".repeat(152));
        assert_eq!(
            seg(&text),
            (Encoding::Gsm7, 306, 3),
            "306 septets would fit two parts, but not with the pair kept whole"
        );
    }

    #[test]
    fn accented_gsm_letters_stay_gsm() {
        assert_eq!(seg("Ça va? ¿Dónde?").0, Encoding::Ucs2, "ó is not in GSM-7");
        assert_eq!(seg("Ça été là à ß").0, Encoding::Gsm7);
    }

    #[test]
    fn ucs2_boundaries() {
        assert_eq!(seg("привет"), (Encoding::Ucs2, 6, 1));
        assert_eq!(seg(&"ж".repeat(70)), (Encoding::Ucs2, 70, 1));
        assert_eq!(seg(&"ж".repeat(71)), (Encoding::Ucs2, 71, 2));
        assert_eq!(seg(&"ж".repeat(134)), (Encoding::Ucs2, 134, 2));
        assert_eq!(seg(&"ж".repeat(135)), (Encoding::Ucs2, 135, 3));
    }

    #[test]
    fn ucs2_counts_utf16_units_and_keeps_surrogates_whole() {
        assert_eq!(seg("😀"), (Encoding::Ucs2, 2, 1));
        assert_eq!(seg(&"😀".repeat(35)), (Encoding::Ucs2, 70, 1));
        assert_eq!(seg(&"😀".repeat(36)), (Encoding::Ucs2, 72, 2));
        // 66 units then a pair that would straddle the 67 boundary.
        let text = format!("{}😀{}", "ж".repeat(66), "ж".repeat(5));
        assert_eq!(seg(&text), (Encoding::Ucs2, 73, 2));
        let text = format!("{}😀{}", "ж".repeat(66), "ж".repeat(66));
        assert_eq!(seg(&text), (Encoding::Ucs2, 134, 3), "134 units fit two parts, but not with the pair kept whole");
    }

    #[test]
    fn one_non_gsm_character_switches_everything() {
        let text = format!("{}😀", "a".repeat(100));
        assert_eq!(seg(&text), (Encoding::Ucs2, 102, 2));
    }
}
