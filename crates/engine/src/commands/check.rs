//! CHECK (CNI spec 1.1 §2 `CHECK`, §3 "Checking an attachment"): each recorded attachment
//! checked by its delegates.

use cni::error::CniError;
use cni::skel::CmdArgs;

use super::{Plumb, who};
use crate::netns;

impl Plumb<'_> {
    pub(super) fn cmd_check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let call = self.call(args)?;
        let _turn = call.turn(args, &self.caller, "CHECK")?;
        self.not_abandoned(&call, args, "CHECK")?;
        netns::check(&args.netns)
            .and_then(|_| self.executor(&call).check(&call.sandbox(args)))
            .map_err(|e| e.context(who(&call.pod_args, &args.container_id)))
    }
}
