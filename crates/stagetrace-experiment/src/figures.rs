//! The figures an experiment reads, chosen from the schema's figure table
//! (`stagetrace_schema`). The verdict, the tables, the live line and the
//! HTML all take their figures from here, so a stage added to the table is
//! compared, tabled and drawn without a change in this crate.

use stagetrace_schema::Figure;

/// Whether the experiment compares a figure against the baseline.
///
/// Every stage is. Of the derived figures, the three that answer what the
/// stages cannot: `gap` (time inside the call no stage explains), `net`
/// (uplink + downlink, the transport where the clocks give no split) and
/// `e2e` (whether the call as a whole moved). `roundtrip` and `server` only
/// add up stages compared anyway; the clock and bookkeeping figures are not
/// the call's own time.
pub(crate) fn is_compared(f: Figure) -> bool {
    f.is_stage() || matches!(f, Figure::Gap | Figure::Net | Figure::E2e)
}

/// A compared figure none of whose parts is compared: the stages and the
/// gap, which between them make up the call. These are drawn on the
/// timeline and named when they stay flat; the others are their sums.
pub(crate) fn is_finest(f: Figure) -> bool {
    is_compared(f) && !f.parts().iter().any(|p| is_compared(*p))
}

/// The compared figures in report order: the finest in table order, then
/// the sums in table order (`…, dispatch, gap, net, e2e`).
pub(crate) fn compared() -> impl Iterator<Item = Figure> {
    let all = Figure::ALL.into_iter().filter(|f| is_compared(*f));
    all.clone()
        .filter(|f| is_finest(*f))
        .chain(all.filter(|f| !is_finest(*f)))
}

/// The finest figures ([`is_finest`]) in report order.
pub(crate) fn finest() -> impl Iterator<Item = Figure> {
    compared().filter(|f| is_finest(*f))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tables list a figure's parts before it, the whole call last; the
    /// stages (the six canonical ones and any the table adds, such as an
    /// async server's `poll_wait`) and the gap are the finest.
    #[test]
    fn parts_come_before_their_sums() {
        let order: Vec<Figure> = compared().collect();
        let pos = |f: Figure| order.iter().position(|g| *g == f);
        for f in &order {
            for p in f.parts().iter().filter_map(|p| pos(*p)) {
                assert!(Some(p) < pos(*f), "{f}");
            }
        }
        assert_eq!(order.last(), Some(&Figure::E2e));
        let finest: Vec<Figure> = finest().collect();
        let stages: Vec<Figure> = Figure::ALL.into_iter().filter(|f| f.is_stage()).collect();
        assert!(Figure::STAGES.iter().all(|f| stages.contains(f)));
        assert_eq!(finest.len(), stages.len() + 1);
        assert!(stages.iter().all(|f| finest.contains(f)), "{finest:?}");
        assert!(finest.contains(&Figure::Gap));
    }

    #[test]
    fn every_stage_of_the_table_is_compared_and_drawn() {
        for f in Figure::ALL.into_iter().filter(|f| f.is_stage()) {
            assert!(is_compared(f) && is_finest(f), "{f}");
        }
    }
}
