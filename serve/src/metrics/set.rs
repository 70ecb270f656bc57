//! A daemon's metrics struct, declared with each metric stated once: its field, its type, how it
//! starts and the name and help it is registered under. Written three times over (the field, its
//! construction, its registration) the lists drift apart, and a metric added to the struct but
//! not registered is silently missing from `/metrics`.

use prometheus_client::registry::{Metric, Registry};

/// Something a daemon registers under a name in its registry.
pub trait Register {
    /// Registers `self` (a clone, which shares its value) as `name`, described by `help`.
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str);
}

impl<T: Metric + Clone> Register for T {
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        registry.register(name, help, self.clone());
    }
}

/// Declares a metrics struct: a private `registry` and the fields listed, each
/// `vis name: Type [= start] [=> "metric_name", "help"];`. A field without a start starts at its
/// `Default`; one without a name is not registered by `registered` (a metric registered only in
/// some configurations, or state beside the metrics). `registered(registry)` builds the struct
/// and registers the named fields in `registry`, in the order listed, which is the order
/// `render()`, the text `/metrics` serves, shows them in.
#[macro_export]
macro_rules! metric_set {
    (
        $(#[$doc:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$field_doc:meta])*
                $field_vis:vis $field:ident: $ty:ty $(= $start:expr)? $(=> $metric:literal, $help:literal)?;
            )*
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug)]
        $vis struct $name {
            registry: ::prometheus_client::registry::Registry,
            $($(#[$field_doc])* $field_vis $field: $ty,)*
        }

        impl $name {
            /// Every field at its start, the named ones registered in `registry`.
            fn registered(registry: ::prometheus_client::registry::Registry) -> Self {
                let mut m = $name { registry, $($field: $crate::__metric_start!($($start)?),)* };
                $($($crate::metrics::set::Register::register(&m.$field, &mut m.registry, $metric, $help);)?)*
                m
            }

            /// The Prometheus text exposition.
            pub fn render(&self) -> String {
                $crate::render(&self.registry)
            }
        }
    };
}

/// A [`metric_set!`] field's start: the one given, or its `Default`.
#[doc(hidden)]
#[macro_export]
macro_rules! __metric_start {
    () => {
        ::core::default::Default::default()
    };
    ($start:expr) => {
        $start
    };
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::registry::Registry;

    crate::metric_set! {
        struct Sample {
            /// Listed first, so shown first.
            pub second: Counter => "second", "Listed first";
            pub first: Gauge = Gauge::default() => "first", "Listed second";
            pub unregistered: Counter;
        }
    }

    #[test]
    fn registers_the_named_fields_in_the_order_listed_and_no_others() {
        let m = Sample::registered(Registry::with_prefix("t"));
        m.second.inc();
        m.unregistered.inc();
        let text = m.render();
        let (second, first) = (text.find("t_second_total 1").unwrap(), text.find("t_first 0").unwrap());
        assert!(second < first, "{text}");
        assert!(!text.contains("unregistered"), "{text}");
    }
}
