//! [`text_enum!`](crate::text_enum): the one way the product turns an enum into its text and
//! back. Each value has one name, the one stored in its column and shown by the API; the macro
//! writes `ALL` (every value, in declaration order), `as_str` and `from_name`, so a name and its
//! parsing can never drift apart. The edge maps every such enum to its column with one line
//! (`store::row::named!`).

/// Declares an enum whose values each have a name:
///
/// ```
/// exactly_core::text_enum! {
///     /// How a door stands.
///     #[derive(Clone, Copy, Debug, PartialEq, Eq)]
///     pub enum Door {
///         Open = "open",
///         /// Shut, not locked.
///         Shut = "shut",
///     }
/// }
/// assert_eq!(Door::ALL, [Door::Open, Door::Shut]);
/// assert_eq!(Door::Shut.as_str(), "shut");
/// assert_eq!(Door::from_name("open"), Some(Door::Open));
/// assert_eq!(Door::from_name("ajar"), None);
/// ```
#[macro_export]
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [$name; [$($text),*].len()] = [$($name::$variant),*];

            /// Its name: as stored in its column and shown by the API.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text ),*
                }
            }

            /// The value named `name`; `None` for a name no value has.
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $( $text => Some($name::$variant), )*
                    _ => None,
                }
            }
        }
    };
}
