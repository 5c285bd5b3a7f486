//! The endpoint URL check on arbitrary text: an answer, never a panic, and answers that hold
//! together. What production accepts, development accepts too; production never accepts
//! plain `http`; and the normalized form (what is stored and sent) is accepted again and is
//! its own normalization, so the check at delivery time agrees with the one at creation.
#![no_main]

use exactly_core::endpoint::EndpointUrl;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let production = EndpointUrl::parse(text, false);
    let development = EndpointUrl::parse(text, true);
    if let Ok(url) = &production {
        assert!(url.as_str().starts_with("https://"), "{url}");
        assert_eq!(development.as_ref().ok(), Some(url), "development accepts what production does");
    }
    for (url, allow_private) in [(production.ok(), false), (development.ok(), true)] {
        if let Some(url) = url {
            let again = EndpointUrl::parse(url.as_str(), allow_private);
            assert_eq!(again.as_ref().map(EndpointUrl::as_str), Ok(url.as_str()), "normalization is stable");
        }
    }
});
