//! Analyses of a whole compiled grammar: the fewest matcher frames a value of each node needs,
//! and how many alternatives the matcher tries at once.
//!
//! At an `anyOf` node the matcher forks one path per
//! alternative (nested `anyOf`s, from `allOf` distribution or `$ref` aliases, multiply), for
//! every byte it checks, so the count bounds the per-token masking cost of a schema. A cycle
//! of `anyOf`s that consumes no input (left recursion: `A = anyOf[A, …]`) would make the
//! matcher recurse forever; both are refused when the schema is compiled.

use super::budget::{Budget, Exhausted};
use super::node::{Node, NodeId};

/// Most alternatives one `anyOf`/`oneOf` node may fan out to (leaves after following nested
/// `anyOf`s).
pub const MAX_ALTERNATIVES: u64 = 256;

/// Checks every `anyOf` node of `nodes`: no cycle through `anyOf`s alone, at most
/// [`MAX_ALTERNATIVES`] leaves each. A depth-first search with an explicit stack.
pub fn check_alternatives(nodes: &[Node]) -> Result<(), String> {
    let alts = |n: NodeId| match &nodes[n] {
        Node::AnyOf(a) => Some(a.as_slice()),
        _ => None,
    };
    // 0: unseen, 1: on the stack, 2: done.
    let mut mark = vec![0u8; nodes.len()];
    let mut fan = vec![0u64; nodes.len()];
    let mut stack: Vec<(NodeId, usize)> = Vec::new();
    for root in 0..nodes.len() {
        if mark[root] != 0 || alts(root).is_none() {
            continue;
        }
        mark[root] = 1;
        stack.push((root, 0));
        while let Some(&mut (n, ref mut next)) = stack.last_mut() {
            let list = alts(n).unwrap_or_default();
            let Some(&child) = list.get(*next) else {
                mark[n] = 2;
                stack.pop();
                if let Some(&(parent, _)) = stack.last() {
                    fan[parent] = fan[parent].saturating_add(fan[n]);
                }
                continue;
            };
            *next += 1;
            if alts(child).is_none() {
                fan[n] += 1;
            } else {
                match mark[child] {
                    0 => {
                        mark[child] = 1;
                        stack.push((child, 0));
                        continue;
                    }
                    1 => {
                        return Err("an 'anyOf'/'$ref' cycle that consumes no input (left \
                                    recursion, e.g. A = anyOf[A, ...]) is not supported"
                            .into())
                    }
                    _ => fan[n] = fan[n].saturating_add(fan[child]),
                }
            }
            if fan[n] > MAX_ALTERNATIVES {
                return Err(format!(
                    "'anyOf'/'oneOf' (after allOf and $ref expansion) has more than \
                     {MAX_ALTERNATIVES} alternatives"
                ));
            }
        }
    }
    Ok(())
}

/// Fewest stack frames per node, by fixed-point iteration (`u32::MAX`: unsatisfiable); each
/// pass over the nodes is charged to `budget`, if given.
pub fn min_depths(nodes: &[Node], budget: Option<&Budget>) -> Result<Vec<u32>, Exhausted> {
    let inf = u32::MAX;
    let mut d = vec![inf; nodes.len()];
    let add = |a: u32, b: u32| if a == inf || b == inf { inf } else { a + b };
    loop {
        if let Some(b) = budget {
            b.charge(nodes.len() as u64, "schema")?;
        }
        let mut changed = false;
        for i in 0..nodes.len() {
            let v = match &nodes[i] {
                Node::Never => inf,
                Node::Any | Node::String { .. } | Node::Number { .. } => 1,
                Node::Boolean | Node::Null | Node::Literal(_) => 1,
                // The object frame, then a key string or a required value.
                Node::Object { props, .. } => props.iter().filter(|p| p.2).fold(2, |m, p| {
                    if d[p.1] == inf {
                        inf
                    } else {
                        m.max(add(d[p.1], 1))
                    }
                }),
                Node::Array {
                    prefix, items, min, ..
                } => {
                    // The deepest of the elements that must be written.
                    let must = prefix.iter().take(*min).copied();
                    let rest = (*min > prefix.len()).then_some(*items);
                    must.chain(rest).fold(1, |m, e| {
                        if d[e] == inf || m == inf {
                            inf
                        } else {
                            m.max(add(d[e], 1))
                        }
                    })
                }
                Node::AnyOf(alts) => alts.iter().map(|&a| d[a]).min().unwrap_or(inf),
            };
            if v < d[i] {
                d[i] = v;
                changed = true;
            }
        }
        if !changed {
            return Ok(d);
        }
    }
}
