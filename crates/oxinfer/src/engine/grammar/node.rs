//! The compiled form of a JSON schema: the [`Grammar`]'s node graph that [`super::schema`]
//! builds, [`super::analysis`], [`super::oneof`] and [`super::unique`] refine, and the matcher
//! walks. Data only, below all of them.

use super::numeric::Bounds;
use super::regex::Dfa;

/// Index of a node in [`Grammar::nodes`].
pub type NodeId = usize;

/// One compiled schema node.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// Any JSON value.
    Any,
    /// No value at all (an unsatisfiable schema, e.g. `false`).
    Never,
    /// An object. `props` are the known keys with their value nodes and whether each is
    /// required; `extra` is the node of values under other keys (`None`: no other keys).
    Object {
        props: Vec<(String, NodeId, bool)>,
        extra: Option<NodeId>,
        /// A pattern (index into [`Grammar::patterns`]) every other key must match
        /// (`patternProperties` with one pattern and `additionalProperties: false`).
        keys: Option<usize>,
    },
    /// An array between `min` and `max` elements: element i is a value of `prefix[i]`
    /// (`prefixItems`, tuple `items`), later ones of `items`.
    Array {
        prefix: Vec<NodeId>,
        items: NodeId,
        min: usize,
        max: Option<usize>,
        /// `uniqueItems`: the canonical texts of every value an element can take (elements are
        /// enums/consts/booleans/nulls; see [`super::unique`]). No element repeats one before.
        unique: Option<Vec<Vec<u8>>>,
    },
    /// A string of `min ..= max` characters, matching pattern `pattern` (an index into
    /// [`Grammar::patterns`]) if any.
    String {
        min: usize,
        max: Option<usize>,
        pattern: Option<usize>,
    },
    /// A number; `integer` forbids a fraction and an exponent; `bounds` also forbid the
    /// exponent and cap the digits.
    Number {
        integer: bool,
        bounds: Option<Bounds>,
    },
    /// `true` or `false`.
    Boolean,
    /// `null`.
    Null,
    /// One of these exact JSON texts (from `enum` / `const`, serialized compactly).
    Literal(Vec<Vec<u8>>),
    /// Any of these alternatives (all that still fit are followed).
    AnyOf(Vec<NodeId>),
}

/// A compiled schema: the nodes and the root.
#[derive(Clone, Debug, PartialEq)]
pub struct Grammar {
    pub nodes: Vec<Node>,
    pub root: NodeId,
    /// Compiled `pattern`s and `format`s.
    pub patterns: Vec<Dfa>,
    /// Per node: the fewest matcher stack frames a value of it needs (`u32::MAX`: none
    /// exists). Keeps recursive schemas from nesting past [`MAX_STACK`].
    pub min_depth: Vec<u32>,
    /// Helper nodes for values of [`Node::Any`]: a free object, a free array, `true`/`false`,
    /// `null`.
    pub any_object: NodeId,
    pub any_array: NodeId,
    pub boolean: NodeId,
    pub null: NodeId,
}

/// Deepest matcher stack (nesting of values, keys and strings).
pub const MAX_STACK: usize = 48;

/// Most values of one `enum` (and of the values a `uniqueItems` array tracks).
pub const MAX_ENUM_VALUES: usize = 1024;
