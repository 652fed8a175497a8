//! A Substrait plan read natively: what it reads, its function calls by cost class, and the
//! shape the time models' features need, for the plans the node's decision sees most.
//!
//! The reference is the Python reader (`plans.inspect`, `plans.PlanIndex`): this one answers
//! only where it models every relation and expression the plan holds, and says
//! [`Unsupported`] otherwise, so that the node falls back to the reference rather than answer
//! differently. Its walk enters the same fields as the reference's (`plans._children`): not
//! types, literals, field references' paths, a read's column mask, a relation's emit and hints,
//! nor an IN list's values.

use std::collections::HashMap;

use prost::Message;
use substrait::proto::{
    expression::{field_reference::RootType, RexType},
    extensions::simple_extension_declaration::MappingType,
    function_argument::ArgType,
    plan_rel::RelType as PlanRelType,
    read_rel::ReadType,
    rel::RelType,
    Expression, FunctionArgument, NamedStruct, Plan, ReadRel, Rel, RelRoot,
};

/// What the native reader does not model (a relation or expression kind, a nested schema):
/// the caller falls back to the reference reader, which also gives the errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub String);

pub type Native<T> = Result<T, Unsupported>;

pub(crate) fn unsupported<T>(what: impl Into<String>) -> Native<T> {
    Err(Unsupported(what.into()))
}

/// The classes of scalar functions by cost (`plans.function_class`, the one home of the
/// lists: the Python side hands them over): 0 cheap, 1 string, 2 heavy (any other).
#[derive(Debug, Clone, Default)]
pub struct FunctionClasses {
    cheap: std::collections::HashSet<String>,
    string: std::collections::HashSet<String>,
    string_prefixes: Vec<String>,
}

pub const CHEAP: usize = 0;
pub const STRING: usize = 1;
pub const HEAVY: usize = 2;

impl FunctionClasses {
    pub fn new(cheap: Vec<String>, string: Vec<String>, string_prefixes: Vec<String>) -> Self {
        Self { cheap: cheap.into_iter().collect(), string: string.into_iter().collect(), string_prefixes }
    }

    pub fn class(&self, name: &str) -> usize {
        if self.cheap.contains(name) {
            CHEAP
        } else if self.string.contains(name) || self.string_prefixes.iter().any(|p| name.starts_with(p.as_str())) {
            STRING
        } else {
            HEAVY
        }
    }
}

/// A decoded plan with its functions' names by anchor (without their signatures).
pub struct SubstraitPlan {
    pub plan: Plan,
    pub names: HashMap<u32, String>,
}

/// What a plan reads (each table once, in the order first read, with its columns in the order
/// asked) and its output names: `plans.PlanInfo`.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanInfo {
    pub reads: Vec<(String, Vec<String>)>,
    pub output: Vec<String>,
}

/// What the time models' features take from a plan beyond its sizes and reads: scalar
/// function calls (all, heavy, string) and the relation kinds present (by their Substrait
/// message names).
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub functions: usize,
    pub heavy: usize,
    pub strings: usize,
    pub kinds: Vec<&'static str>,
}

impl SubstraitPlan {
    /// Decodes a plan's bytes; the error is the decoder's.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let plan = Plan::decode(bytes).map_err(|e| e.to_string())?;
        let names = plan
            .extensions
            .iter()
            .filter_map(|e| match &e.mapping_type {
                Some(MappingType::ExtensionFunction(f)) => {
                    Some((f.function_anchor, f.name.split(':').next().unwrap_or("").to_string()))
                }
                _ => None,
            })
            .collect();
        Ok(Self { plan, names })
    }

    /// The one root relation (None: not exactly one).
    pub fn root(&self) -> Option<&RelRoot> {
        match self.plan.relations.as_slice() {
            [one] => match &one.rel_type {
                Some(PlanRelType::Root(r)) => Some(r),
                _ => None,
            },
            _ => None,
        }
    }

    /// The name of a function anchor, "?" where the plan does not declare it.
    pub fn name(&self, anchor: u32) -> &str {
        self.names.get(&anchor).map(String::as_str).unwrap_or("?")
    }

    /// `plans.inspect`: the tables read and the output names. Unsupported where the reference
    /// would raise (its errors say why) or where a relation or expression is not modelled.
    pub fn info(&self) -> Native<PlanInfo> {
        let root = self.root().ok_or_else(|| Unsupported("not one root relation".into()))?;
        let input = root.input.as_ref().ok_or_else(|| Unsupported("an empty root".into()))?;
        let mut reads: Vec<(String, Vec<String>)> = Vec::new();
        let any = FunctionClasses::default();
        visit_all_rels(input, &mut |r| {
            for e in rel_expressions(r)? {
                self.expression_calls(e, &any, &mut [0; 3], &mut |_| {})?; // modelled expressions only
            }
            if let Some(RelType::Read(read)) = &r.rel_type {
                let name = table_name(read)?;
                let cols = read_columns(read)?;
                match reads.iter_mut().find(|(t, _)| t == name) {
                    Some((_, have)) => {
                        for c in cols {
                            if !have.contains(&c) {
                                have.push(c);
                            }
                        }
                    }
                    None => {
                        let mut unique: Vec<String> = Vec::new();
                        for c in cols {
                            if !unique.contains(&c) {
                                unique.push(c);
                            }
                        }
                        reads.push((name.to_string(), unique));
                    }
                }
            }
            Ok(())
        })?;
        if reads.is_empty() {
            return unsupported("the plan reads no table");
        }
        Ok(PlanInfo { reads, output: root.names.clone() })
    }

    /// Scalar calls under an expression by class (an IN list one cheap call): `PlanIndex.calls`.
    pub fn calls(&self, e: &Expression, classes: &FunctionClasses, out: &mut [usize; 3]) -> Native<()> {
        self.expression_calls(e, classes, out, &mut |_| {})
    }

    /// The calls under an expression, and each scalar function's class to `seen`: those of
    /// its subqueries' relations too (the reference counts every call under a message).
    fn expression_calls(
        &self,
        e: &Expression,
        classes: &FunctionClasses,
        out: &mut [usize; 3],
        seen: &mut dyn FnMut(usize),
    ) -> Native<()> {
        match &e.rex_type {
            Some(RexType::ScalarFunction(f)) => {
                let name = self.name(f.function_reference);
                let class = if name == "like" && anchored_like(&f.arguments) { CHEAP } else { classes.class(name) };
                out[class] += 1;
                seen(class);
            }
            Some(RexType::SingularOrList(_) | RexType::MultiOrList(_)) => out[CHEAP] += 1,
            Some(RexType::Cast(c)) => out[cast_class(c)] += 1,
            _ => {}
        }
        let (exprs, rels) = expression_children(e)?;
        for x in exprs {
            self.expression_calls(x, classes, out, seen)?;
        }
        for sub in rels {
            let mut all = Vec::new();
            visit_all_rels(sub, &mut |r| {
                all.push(r);
                Ok(())
            })?;
            for r in all {
                for x in rel_expressions(r)? {
                    self.expression_calls(x, classes, out, seen)?;
                }
            }
        }
        Ok(())
    }

    /// What the features take from the plan beyond its reads (`PlanIndex.shape`).
    pub fn shape(&self, classes: &FunctionClasses) -> Native<Shape> {
        let root = self.root().and_then(|r| r.input.as_ref());
        let Some(root) = root else { return unsupported("not one root relation") };
        let mut kinds: Vec<&'static str> = Vec::new();
        let mut out = [0usize; 3];
        let (mut functions, mut heavy, mut strings) = (0, 0, 0);
        visit_all_rels(root, &mut |r| {
            let kind = rel_kind(r)?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
            Ok(())
        })?;
        visit_rels(root, &mut |r| {
            for e in rel_expressions(r)? {
                // a subquery's calls are counted under the expression that holds it
                self.expression_calls(e, classes, &mut out, &mut |class| {
                    functions += 1;
                    heavy += usize::from(class == HEAVY);
                    strings += usize::from(class == STRING);
                })?;
            }
            Ok(())
        })?;
        Ok(Shape { functions, heavy, strings, kinds })
    }
}

/// A cast's cost class (`plans.cast_class`): one to a date, time or text parses or formats
/// characters (a string call), any other converts a word (cheap). It counts in the work, not
/// among the plan's functions.
fn cast_class(c: &substrait::proto::expression::Cast) -> usize {
    use substrait::proto::r#type::Kind;
    match c.r#type.as_ref().and_then(|t| t.kind.as_ref()) {
        Some(
            Kind::Date(_)
            | Kind::PrecisionTime(_)
            | Kind::PrecisionTimestamp(_)
            | Kind::PrecisionTimestampTz(_)
            | Kind::String(_)
            | Kind::Varchar(_)
            | Kind::FixedChar(_),
        ) => STRING,
        _ => CHEAP,
    }
}

/// The expressions of function arguments (not their enum or type arguments).
pub(crate) fn argument_values(args: &[FunctionArgument]) -> impl Iterator<Item = &Expression> {
    args.iter().filter_map(|a| match &a.arg_type {
        Some(ArgType::Value(v)) => Some(v),
        _ => None,
    })
}

/// The empty expression a function argument that is not a value reads as (`a.value` of an
/// enum or type argument in the reference).
pub(crate) fn argument_value(a: &FunctionArgument) -> &Expression {
    static EMPTY: Expression = Expression { rex_type: None };
    match &a.arg_type {
        Some(ArgType::Value(v)) => v,
        _ => &EMPTY,
    }
}

/// `plans.anchored_like`: a LIKE whose pattern is a literal anchored at one end with no other
/// wildcard (`'1Z5%'`, `'%.com'`) and no escape; Arrow's kernel compares that end's bytes
/// (starts_with, ends_with), as cheap as an equality, where `'%pickup%'` searches each value
/// and other patterns run a regular expression.
fn anchored_like(args: &[FunctionArgument]) -> bool {
    use substrait::proto::expression::literal::LiteralType;
    let no_escape = |e: &FunctionArgument| matches!(&argument_value(e).rex_type, Some(RexType::Literal(l)) if matches!(l.literal_type, Some(LiteralType::Null(_))));
    let pattern = match args {
        [_, pattern] => pattern,
        [_, pattern, escape] if no_escape(escape) => pattern,
        _ => return false,
    };
    let Some(RexType::Literal(l)) = &argument_value(pattern).rex_type else { return false };
    let p = match &l.literal_type {
        Some(LiteralType::String(s)) => s.as_str(),
        Some(LiteralType::VarChar(v)) => v.value.as_str(),
        _ => return false,
    };
    let core = p.strip_suffix('%').or_else(|| p.strip_prefix('%'));
    core.is_some_and(|c| !c.contains(['%', '_', '\\']))
}

/// A read's table name (the last of its names).
pub(crate) fn table_name(read: &ReadRel) -> Native<&str> {
    match &read.read_type {
        Some(ReadType::NamedTable(t)) => match t.names.last() {
            Some(n) => Ok(n),
            None => unsupported("a read of a table without a name"),
        },
        _ => unsupported("a read of something other than a named table"),
    }
}

/// The top-level columns a read asks for (`plans.read_columns`): its projection's, else its
/// base schema's.
pub(crate) fn read_columns(read: &ReadRel) -> Native<Vec<String>> {
    let names = top_level_names(read.base_schema.as_ref())?;
    match read.projection.as_ref() {
        Some(p) => {
            let items = p.select.as_ref().map(|s| s.struct_items.as_slice()).unwrap_or(&[]);
            items
                .iter()
                .map(|i| {
                    usize::try_from(i.field)
                        .ok()
                        .and_then(|i| names.get(i).cloned())
                        .ok_or_else(|| Unsupported("a projection past the schema".into()))
                })
                .collect()
        }
        None => Ok(names),
    }
}

/// The names of a schema's top-level fields (`plans.field_names`, each field's first): a
/// NamedStruct lists every name depth first, a struct's fields' after its own.
pub(crate) fn top_level_names(schema: Option<&NamedStruct>) -> Native<Vec<String>> {
    let names: &[String] = schema.map(|s| s.names.as_slice()).unwrap_or(&[]);
    let types = schema.and_then(|s| s.r#struct.as_ref()).map(|s| s.types.as_slice()).unwrap_or(&[]);
    if names.len() == types.len() {
        return Ok(names.to_vec());
    }
    let mut out = Vec::with_capacity(types.len());
    let mut at = 0;
    for t in types {
        let Some(name) = names.get(at) else { return unsupported("a schema with fewer names than fields") };
        out.push(name.clone());
        at += 1 + nested_names(t);
    }
    Ok(out)
}

/// The names a type nests (`plans._nested_names`): a struct's fields', through lists and maps.
fn nested_names(t: &substrait::proto::Type) -> usize {
    use substrait::proto::r#type::Kind;
    match &t.kind {
        Some(Kind::Struct(s)) => s.types.iter().map(|c| 1 + nested_names(c)).sum(),
        Some(Kind::List(l)) => l.r#type.as_deref().map_or(0, nested_names),
        Some(Kind::Map(m)) => m.key.as_deref().map_or(0, nested_names) + m.value.as_deref().map_or(0, nested_names),
        _ => 0,
    }
}

/// Every relation under `r`, `r` first, depth first and left to right (the reference's order
/// of finding reads), through the relations the native reader models.
pub(crate) fn visit_rels(r: &Rel, f: &mut dyn FnMut(&Rel) -> Native<()>) -> Native<()> {
    f(r)?;
    for child in rel_inputs(r)? {
        visit_rels(child, f)?;
    }
    Ok(())
}

/// [`visit_rels`], and after each relation's inputs the relations of the subqueries in its
/// expressions (the reference's order of finding reads: a relation's inputs come before its
/// expressions in field order). A read's own filter is not entered, as the reference's
/// search does not look inside a read.
pub(crate) fn visit_all_rels<'a>(r: &'a Rel, f: &mut dyn FnMut(&'a Rel) -> Native<()>) -> Native<()> {
    f(r)?;
    for child in rel_inputs(r)? {
        visit_all_rels(child, f)?;
    }
    if matches!(r.rel_type, Some(RelType::Read(_))) {
        return Ok(());
    }
    for e in rel_expressions(r)? {
        for sub in subqueries(e)? {
            visit_all_rels(sub, f)?;
        }
    }
    Ok(())
}

/// The relations of the subqueries under an expression, outermost ones only, in field order.
fn subqueries(e: &Expression) -> Native<Vec<&Rel>> {
    let (exprs, mut rels) = expression_children(e)?;
    for x in exprs {
        rels.extend(subqueries(x)?);
    }
    Ok(rels)
}

/// An expression's direct sub-expressions and, for a subquery, its relations, in field order
/// (what the reference's walk enters: not an IN list's options, literals or field paths). A
/// window function is not a call itself (as an aggregate's measure is not): its partitions,
/// sort keys and arguments are walked.
pub(crate) fn expression_children(e: &Expression) -> Native<(Vec<&Expression>, Vec<&Rel>)> {
    use substrait::proto::expression::subquery::SubqueryType;
    Ok(match &e.rex_type {
        None | Some(RexType::Literal(_)) => (vec![], vec![]),
        Some(RexType::Selection(f)) => match &f.root_type {
            Some(RootType::Expression(x)) => (vec![&**x], vec![]),
            Some(RootType::LambdaParameterReference(_)) => return unsupported("a lambda parameter"),
            _ => (vec![], vec![]),
        },
        Some(RexType::ScalarFunction(f)) => (argument_values(&f.arguments).collect(), vec![]),
        Some(RexType::IfThen(t)) => {
            let ifs = t.ifs.iter().flat_map(|c| c.r#if.iter().chain(c.then.iter()));
            (ifs.chain(t.r#else.iter().map(|b| &**b)).collect(), vec![])
        }
        Some(RexType::SwitchExpression(s)) => {
            let head = s.r#match.iter().map(|b| &**b);
            let thens = s.ifs.iter().flat_map(|c| c.then.iter());
            (head.chain(thens).chain(s.r#else.iter().map(|b| &**b)).collect(), vec![])
        }
        Some(RexType::SingularOrList(s)) => (boxed(&s.value), vec![]),
        Some(RexType::MultiOrList(m)) => (m.value.iter().collect(), vec![]),
        Some(RexType::Cast(c)) => (boxed(&c.input), vec![]),
        Some(RexType::WindowFunction(w)) => {
            let sorts = w.sorts.iter().filter_map(|s| s.expr.as_ref());
            (w.partitions.iter().chain(sorts).chain(argument_values(&w.arguments)).collect(), vec![])
        }
        Some(RexType::Subquery(q)) => match &q.subquery_type {
            Some(SubqueryType::Scalar(x)) => (vec![], boxed(&x.input)),
            Some(SubqueryType::InPredicate(x)) => (x.needles.iter().collect(), boxed(&x.haystack)),
            Some(SubqueryType::SetPredicate(x)) => (vec![], boxed(&x.tuples)),
            Some(SubqueryType::SetComparison(x)) => (boxed(&x.left), boxed(&x.right)),
            None => (vec![], vec![]),
        },
        Some(_) => return unsupported("an expression kind the native reader does not model"),
    })
}

/// [`expression_children`], mutable: an expression's direct sub-expressions; None for a
/// subquery (the rewrites that walk them do not enter one) or a kind not modelled.
pub(crate) fn expression_children_mut(e: &mut Expression) -> Option<Vec<&mut Expression>> {
    Some(match &mut e.rex_type {
        None | Some(RexType::Literal(_)) => vec![],
        Some(RexType::Selection(f)) => match &mut f.root_type {
            Some(RootType::Expression(x)) => vec![&mut **x],
            Some(RootType::LambdaParameterReference(_)) => return None,
            _ => vec![],
        },
        Some(RexType::ScalarFunction(f)) => argument_values_mut(&mut f.arguments),
        Some(RexType::IfThen(t)) => {
            let ifs = t.ifs.iter_mut().flat_map(|c| c.r#if.iter_mut().chain(c.then.iter_mut()));
            ifs.chain(t.r#else.iter_mut().map(|b| &mut **b)).collect()
        }
        Some(RexType::SwitchExpression(s)) => {
            let head = s.r#match.iter_mut().map(|b| &mut **b);
            let thens = s.ifs.iter_mut().flat_map(|c| c.then.iter_mut());
            head.chain(thens).chain(s.r#else.iter_mut().map(|b| &mut **b)).collect()
        }
        Some(RexType::SingularOrList(s)) => s.value.iter_mut().map(|b| &mut **b).collect(),
        Some(RexType::MultiOrList(m)) => m.value.iter_mut().collect(),
        Some(RexType::Cast(c)) => c.input.iter_mut().map(|b| &mut **b).collect(),
        Some(RexType::WindowFunction(w)) => {
            let sorts = w.sorts.iter_mut().filter_map(|s| s.expr.as_mut());
            w.partitions.iter_mut().chain(sorts).chain(argument_values_mut(&mut w.arguments)).collect()
        }
        Some(_) => return None,
    })
}

/// [`argument_values`], mutable.
fn argument_values_mut(args: &mut [FunctionArgument]) -> Vec<&mut Expression> {
    args.iter_mut()
        .filter_map(|a| match &mut a.arg_type {
            Some(ArgType::Value(v)) => Some(v),
            _ => None,
        })
        .collect()
}

/// The message an optional boxed field holds, as a list of none or one.
fn boxed<T>(x: &Option<Box<T>>) -> Vec<&T> {
    x.iter().map(|b| &**b).collect()
}

/// A relation's inputs, in field order.
pub(crate) fn rel_inputs(r: &Rel) -> Native<Vec<&Rel>> {
    Ok(match &r.rel_type {
        Some(RelType::Read(_)) => vec![],
        Some(RelType::Filter(x)) => x.input.iter().map(|b| &**b).collect(),
        Some(RelType::Fetch(x)) => x.input.iter().map(|b| &**b).collect(),
        Some(RelType::Aggregate(x)) => x.input.iter().map(|b| &**b).collect(),
        Some(RelType::Sort(x)) => x.input.iter().map(|b| &**b).collect(),
        Some(RelType::Project(x)) => x.input.iter().map(|b| &**b).collect(),
        Some(RelType::Join(x)) => x.left.iter().chain(x.right.iter()).map(|b| &**b).collect(),
        Some(RelType::Cross(x)) => x.left.iter().chain(x.right.iter()).map(|b| &**b).collect(),
        Some(RelType::Set(x)) => x.inputs.iter().collect(),
        _ => return unsupported("a relation kind the native reader does not model"),
    })
}

/// A relation's own expressions (where the reference's walk finds calls), in field order.
pub(crate) fn rel_expressions(r: &Rel) -> Native<Vec<&Expression>> {
    Ok(match &r.rel_type {
        Some(RelType::Read(x)) => {
            if !matches!(x.read_type, Some(ReadType::NamedTable(_))) {
                return unsupported("a read of something other than a named table");
            }
            x.filter.iter().chain(x.best_effort_filter.iter()).map(|b| &**b).collect()
        }
        Some(RelType::Filter(x)) => x.condition.iter().map(|b| &**b).collect(),
        Some(RelType::Fetch(x)) => x.offset_expr.iter().chain(x.count_expr.iter()).map(|b| &**b).collect(),
        Some(RelType::Aggregate(x)) => {
            let mut out: Vec<&Expression> = Vec::new();
            for m in &x.measures {
                out.extend(measure_expressions(m));
            }
            out.extend(x.grouping_expressions.iter());
            out
        }
        Some(RelType::Sort(x)) => x.sorts.iter().filter_map(|s| s.expr.as_ref()).collect(),
        Some(RelType::Project(x)) => x.expressions.iter().collect(),
        Some(RelType::Join(x)) => x.expression.iter().chain(x.post_join_filter.iter()).map(|b| &**b).collect(),
        Some(RelType::Cross(_)) | Some(RelType::Set(_)) => vec![],
        _ => return unsupported("a relation kind the native reader does not model"),
    })
}

/// An aggregate measure's expressions: its function's argument values, sort keys, and filter.
pub(crate) fn measure_expressions(m: &substrait::proto::aggregate_rel::Measure) -> impl Iterator<Item = &Expression> {
    let f = m.measure.as_ref();
    let args = f.into_iter().flat_map(|f| argument_values(&f.arguments));
    let sorts = f.into_iter().flat_map(|f| f.sorts.iter().filter_map(|s| s.expr.as_ref()));
    args.chain(sorts).chain(m.filter.iter())
}

/// A relation's Substrait message name (what `DESCRIPTOR.name` gives the reference).
pub(crate) fn rel_kind(r: &Rel) -> Native<&'static str> {
    Ok(match &r.rel_type {
        Some(RelType::Read(_)) => "ReadRel",
        Some(RelType::Filter(_)) => "FilterRel",
        Some(RelType::Fetch(_)) => "FetchRel",
        Some(RelType::Aggregate(_)) => "AggregateRel",
        Some(RelType::Sort(_)) => "SortRel",
        Some(RelType::Project(_)) => "ProjectRel",
        Some(RelType::Join(_)) => "JoinRel",
        Some(RelType::Cross(_)) => "CrossRel",
        Some(RelType::Set(_)) => "SetRel",
        _ => return unsupported("a relation kind the native reader does not model"),
    })
}
