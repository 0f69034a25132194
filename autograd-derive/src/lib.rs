//! `#[derive(Module)]` for `autograd-nn`: the listing half of a module
//! (`autograd_nn::ModuleFields`) written from the struct's fields, so a
//! custom module only writes its forward.
//!
//! Each field is classified by its type and attributes:
//!
//! | field | becomes |
//! |---|---|
//! | `Parameter<B>`, `Option<Parameter<B>>`, `Vec<Parameter<B>>` | parameters `name`, `name.0`, ... |
//! | `#[buffer]` on `Tensor<B>`, `Option<Tensor<B>>`, `Vec<Tensor<B>>` | buffers (state, not trained: running statistics) |
//! | numbers, `bool`, `String`, `DType`, `PhantomData`, and `Vec`/`Option` of them | nothing (configuration) |
//! | `#[module(skip)]` | nothing |
//! | anything else: `M`, `Option<M>`, `Vec<M>`, `Box<M>` (`M: Module<B>`, `Box<dyn Module<B>>`) | child modules `name`, `name.0`, ... (PyTorch's `ModuleList` names) |
//!
//! The backend is the struct's first type parameter (or the one named by
//! `#[module(backend = B)]`, which also names a concrete backend for a
//! non-generic struct: `#[module(backend = Cpu)]`). A struct without type
//! parameters whose fields are all configuration (an activation, dropout)
//! gets an impl for every backend.
//! `type_name` is the struct's name.
//!
//! See `autograd_nn::Module` for an example.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, GenericArgument, Ident, PathArguments, Type, parse_macro_input};

/// Derives `autograd_nn::ModuleFields` (parameters, buffers, children and
/// the type name) from the struct's fields; see the crate documentation for
/// the rules.
#[proc_macro_derive(Module, attributes(module, buffer))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(input).unwrap_or_else(|e| e.to_compile_error()).into()
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Param,
    Buffer,
    Child,
}

#[derive(Clone, Copy, PartialEq)]
enum Outer {
    Plain,
    Option,
    Vec,
}

struct Field {
    access: Tokens,
    name: String,
    kind: Kind,
    outer: Outer,
    boxed: bool,
}

/// The path through which generated code names autograd-nn.
fn nn_path() -> Tokens {
    use proc_macro_crate::{FoundCrate, crate_name};
    match crate_name("autograd-nn") {
        // Inside autograd-nn (its lib has `extern crate self as autograd_nn`), its tests and doctests.
        Ok(FoundCrate::Itself) => quote!(::autograd_nn),
        Ok(FoundCrate::Name(n)) => {
            let id = Ident::new(&n, Span::call_site());
            quote!(::#id)
        }
        Err(_) => match crate_name("autograd") {
            Ok(FoundCrate::Name(n)) => {
                let id = Ident::new(&n, Span::call_site());
                quote!(::#id::nn)
            }
            _ => quote!(::autograd_nn),
        },
    }
}

fn expand(input: DeriveInput) -> syn::Result<Tokens> {
    let nn = nn_path();
    let name = &input.ident;
    let fields = match &input.data {
        Data::Struct(s) => &s.fields,
        _ => return Err(syn::Error::new_spanned(&input.ident, "#[derive(Module)] supports structs only")),
    };
    let mut backend: Option<Type> = None;
    for attr in &input.attrs {
        if attr.path().is_ident("module") {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("backend") {
                    backend = Some(meta.value()?.parse()?);
                    Ok(())
                } else {
                    Err(meta.error("expected `backend = B`"))
                }
            })?;
        }
    }
    let first_type_param = input.generics.type_params().next().map(|p| p.ident.clone());
    let generic_over_all = backend.is_none() && first_type_param.is_none();
    let b: Tokens = match (&backend, &first_type_param) {
        (Some(t), _) => quote!(#t),
        (None, Some(p)) => quote!(#p),
        (None, None) => quote!(__B),
    };
    let mut list = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let (access, fname) = match &f.ident {
            Some(id) => (quote!(#id), id.to_string()),
            None => {
                let idx = syn::Index::from(i);
                (quote!(#idx), i.to_string())
            }
        };
        let mut kind = None;
        for attr in &f.attrs {
            if attr.path().is_ident("buffer") {
                kind = Some(Some(Kind::Buffer));
            } else if attr.path().is_ident("module") {
                attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident("skip") {
                        kind = Some(None);
                        Ok(())
                    } else {
                        Err(meta.error("expected `skip`"))
                    }
                })?;
            }
        }
        let (outer, inner) = unwrap_outer(&f.ty);
        let (boxed, inner) = match unwrap_one(inner, "Box") {
            Some(t) => (true, t),
            None => (false, inner),
        };
        let kind = match kind {
            Some(k) => k,
            None if last_ident(inner).as_deref() == Some("Parameter") => Some(Kind::Param),
            None if is_config(inner) => None,
            None => Some(Kind::Child),
        };
        if let Some(kind) = kind {
            list.push(Field { access, name: fname, kind, outer, boxed });
        }
    }
    if generic_over_all && !list.is_empty() {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Module)]: a struct with parameters, buffers or children needs a backend type parameter, or #[module(backend = ...)]",
        ));
    }
    let params = lister(&list, Kind::Param, false, &quote!(&#nn::Parameter<#b>));
    let params_mut = lister(&list, Kind::Param, true, &quote!(&mut #nn::Parameter<#b>));
    let buffers = lister(&list, Kind::Buffer, false, &quote!(&#nn::__derive::Tensor<#b>));
    let buffers_mut = lister(&list, Kind::Buffer, true, &quote!(&mut #nn::__derive::Tensor<#b>));
    let children = lister(&list, Kind::Child, false, &quote!(&dyn #nn::Module<#b>));
    let children_mut = lister(&list, Kind::Child, true, &quote!(&mut dyn #nn::Module<#b>));
    let type_name = name.to_string();
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let header = if generic_over_all {
        // a struct without a backend parameter (a pooling layer) implements
        // the fields for every backend, keeping its own (const) generics
        let mut generics = input.generics.clone();
        generics.params.insert(0, syn::parse_quote!(__B: #nn::__derive::Backend));
        let (impl_all, _, _) = generics.split_for_impl();
        quote!(impl #impl_all #nn::ModuleFields<__B> for #name #ty_generics #where_clause)
    } else {
        quote!(impl #impl_generics #nn::ModuleFields<#b> for #name #ty_generics #where_clause)
    };
    Ok(quote! {
        #[automatically_derived]
        #header {
            fn params(&self) -> ::std::vec::Vec<(::std::string::String, &#nn::Parameter<#b>)> { #params }
            fn params_mut(&mut self) -> ::std::vec::Vec<(::std::string::String, &mut #nn::Parameter<#b>)> { #params_mut }
            fn buffers(&self) -> ::std::vec::Vec<(::std::string::String, &#nn::__derive::Tensor<#b>)> { #buffers }
            fn buffers_mut(&mut self) -> ::std::vec::Vec<(::std::string::String, &mut #nn::__derive::Tensor<#b>)> { #buffers_mut }
            fn children(&self) -> ::std::vec::Vec<(::std::string::String, &dyn #nn::Module<#b>)> { #children }
            fn children_mut(&mut self) -> ::std::vec::Vec<(::std::string::String, &mut dyn #nn::Module<#b>)> { #children_mut }
            fn type_name(&self) -> &'static str { #type_name }
        }
    })
}

/// The body of one listing method: a vector of `(dotted name, reference)`.
fn lister(list: &[Field], kind: Kind, mutable: bool, elem: &Tokens) -> Tokens {
    let pushes = list.iter().filter(|f| f.kind == kind).map(|f| {
        let (access, name) = (&f.access, &f.name);
        let x = format_ident!("__x");
        // `__x` is `&T` / `&mut T` (or the Box holding T): reborrow as the element type.
        let item = match (f.boxed, mutable) {
            (true, false) => quote!(&**#x as #elem),
            (true, true) => quote!(&mut **#x as #elem),
            (false, _) => quote!(#x as #elem),
        };
        let (r, iter) = if mutable { (quote!(&mut), quote!(iter_mut)) } else { (quote!(&), quote!(iter)) };
        match f.outer {
            Outer::Plain => quote! { { let #x = #r self.#access; __out.push((::std::string::String::from(#name), #item)); } },
            Outer::Option => quote! { if let ::std::option::Option::Some(#x) = #r self.#access { __out.push((::std::string::String::from(#name), #item)); } },
            Outer::Vec => quote! {
                for (__i, #x) in self.#access.#iter().enumerate() { __out.push((::std::format!("{}.{}", #name, __i), #item)); }
            },
        }
    });
    quote! {
        #[allow(unused_mut)]
        let mut __out = ::std::vec::Vec::new();
        #(#pushes)*
        __out
    }
}

fn last_ident(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// `T` in `Wrapper<T>` when the type is `Wrapper<T>`.
fn unwrap_one<'a>(ty: &'a Type, wrapper: &str) -> Option<&'a Type> {
    let Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != wrapper {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &seg.arguments else { return None };
    args.args.iter().find_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    })
}

fn unwrap_outer(ty: &Type) -> (Outer, &Type) {
    if let Some(t) = unwrap_one(ty, "Option") {
        (Outer::Option, t)
    } else if let Some(t) = unwrap_one(ty, "Vec") {
        (Outer::Vec, t)
    } else {
        (Outer::Plain, ty)
    }
}

/// Plain data that configures a module rather than belonging to its state.
fn is_config(ty: &Type) -> bool {
    const CONFIG: &[&str] = &[
        "bool",
        "char",
        "f32",
        "f64",
        "i8",
        "i16",
        "i32",
        "i64",
        "i128",
        "isize",
        "u8",
        "u16",
        "u32",
        "u64",
        "u128",
        "usize",
        "String",
        "DType",
        "PhantomData",
        "AtomicBool",
        "TrainingFlag",
    ];
    match ty {
        Type::Tuple(_) | Type::Reference(_) => true,
        Type::Path(_) => last_ident(ty).is_some_and(|n| CONFIG.contains(&n.as_str())),
        _ => false,
    }
}
