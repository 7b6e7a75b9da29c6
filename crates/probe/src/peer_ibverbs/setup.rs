//! Opening a port: the protection domain, memory, completion channel and
//! queues and the UD queue pair created one at a time into the
//! [`UdPort`], taken to RTS with the receives posted.

use super::*;

impl UdPort {
    /// Creates PD, MR, CQ and the UD QP, takes the QP to RTS and posts the
    /// receives. On error, what was created is freed by `Drop`.
    pub(super) fn setup(&mut self, device: &str, gid_index: u32) -> Result<(), Failure> {
        let port = self.port;
        // SAFETY: an all-zero ibv_port_attr is valid (plain integers).
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; attr is a valid out-pointer of the right size.
        let rc = unsafe { ibv_query_port(self.ctx, port, &mut attr) };
        if rc != 0 {
            return Err(os_fail(
                Reason::QueryPort,
                format!("ibv_query_port({device}/{port})"),
                rc,
            ));
        }
        if attr.state != ibv_port_state::IBV_PORT_ACTIVE {
            return Err(Failure::new(
                Reason::PortDown,
                format!("{device}/{port} is not ACTIVE"),
            ));
        }
        if attr.link_layer != LINK_LAYER_ETHERNET {
            // The endpoint document carries no LID, and an IB UD address
            // handle needs one: InfiniBand peers are not probed yet.
            return Err(Failure::new(
                Reason::QueryPort,
                format!("{device}/{port} is InfiniBand: peer probes run on RoCE ports only"),
            ));
        }
        self.mtu = mtu_bytes(attr.active_mtu);
        self.sgid_index = u8::try_from(gid_index).map_err(|_| {
            Failure::new(
                Reason::GidIndex,
                format!("GID index {gid_index} does not fit the 8-bit sgid_index"),
            )
        })?;
        // SAFETY: an all-zero GID is a valid value of the union.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; gid is a valid out-pointer.
        let rc = unsafe { ibv_query_gid(self.ctx, port, i32::from(self.sgid_index), &mut gid) };
        if rc != 0 {
            return Err(os_fail(
                Reason::GidIndex,
                format!("GID index {gid_index} of {device}/{port}"),
                last_errno(),
            ));
        }
        // SAFETY: every bit pattern is a valid [u8; 16].
        let raw = unsafe { gid.raw };
        self.gid = Ipv6Addr::from(raw);
        if self.gid.is_unspecified() {
            return Err(Failure::new(
                Reason::GidIndex,
                format!("GID index {gid_index} of {device}/{port} is empty"),
            ));
        }
        // SAFETY: ctx is open.
        self.pd = unsafe { ibv_alloc_pd(self.ctx) };
        if self.pd.is_null() {
            return Err(os_fail(
                Reason::AllocPd,
                "ibv_alloc_pd".into(),
                last_errno(),
            ));
        }
        let factory = PdAhFactory {
            pd: self.pd,
            port,
            sgid_index: self.sgid_index,
        };
        self.ahs = Some(AhCache::new(factory).map_err(|e| {
            Failure::new(
                Reason::AllocPd,
                format!("address-handle resolver thread: {e}"),
            )
        })?);
        // SAFETY: the buffer lives as long as the port and is deregistered
        // (Drop) before it is freed (field order: buf drops after Drop ran).
        self.mr = unsafe {
            ibv_reg_mr(
                self.pd,
                self.buf.ptr.cast(),
                self.buf.len,
                ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32,
            )
        };
        if self.mr.is_null() {
            let errno = last_errno();
            let reason = if matches!(errno, libc::ENOMEM | libc::EPERM | libc::EAGAIN) {
                Reason::Memlock
            } else {
                Reason::RegMr
            };
            return Err(os_fail(
                reason,
                format!("ibv_reg_mr({} bytes)", self.buf.len),
                errno,
            ));
        }
        self.channel = nonblocking_channel(self.ctx)?;
        // Both CQs on the one channel; extended ones with the device's
        // timestamps where it keeps a clock.
        let clock = DeviceClock::of(self.ctx);
        self.send_cq = Cq::create(self.ctx, SEND_SLOTS, self.channel, clock.is_some())?;
        self.recv_cq = Cq::create(self.ctx, RECV_SLOTS, self.channel, clock.is_some())?;
        self.clock = clock.filter(|_| self.send_cq.timestamps() && self.recv_cq.timestamps());
        // SAFETY: an all-zero init attr is valid (null pointers, zero counts).
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = self.send_cq.raw();
        init.recv_cq = self.recv_cq.raw();
        init.cap.max_send_wr = SEND_SLOTS as u32;
        init.cap.max_recv_wr = RECV_SLOTS as u32;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.qp_type = ibv_qp_type::IBV_QPT_UD;
        // SAFETY: pd and the CQs are live; init is a valid attribute.
        self.qp = unsafe { ibv_create_qp(self.pd, &mut init) };
        if self.qp.is_null() {
            return Err(os_fail(
                Reason::CreateQp,
                "ibv_create_qp (UD)".into(),
                last_errno(),
            ));
        }
        // SAFETY: qp is live.
        self.qpn = unsafe { (*self.qp).qp_num };
        let m = ibv_qp_attr_mask::IBV_QP_STATE;
        self.modify(
            ibv_qp_state::IBV_QPS_INIT,
            m | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
                | ibv_qp_attr_mask::IBV_QP_PORT
                | ibv_qp_attr_mask::IBV_QP_QKEY,
            Reason::QpInit,
            "UD QP RESET→INIT",
        )?;
        self.modify(
            ibv_qp_state::IBV_QPS_RTR,
            m,
            Reason::QpRtr,
            "UD QP INIT→RTR",
        )?;
        self.modify(
            ibv_qp_state::IBV_QPS_RTS,
            m | ibv_qp_attr_mask::IBV_QP_SQ_PSN,
            Reason::QpRts,
            "UD QP RTR→RTS",
        )?;
        for slot in 0..RECV_SLOTS {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    pub(super) fn modify(
        &mut self,
        state: ibv_qp_state::Type,
        mask: ibv_qp_attr_mask,
        reason: Reason,
        what: &str,
    ) -> Result<(), Failure> {
        // SAFETY: an all-zero QP attribute is valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = state;
        attr.pkey_index = 0;
        attr.port_num = self.port;
        attr.qkey = QKEY;
        attr.sq_psn = 0;
        // SAFETY: qp is live; the mask names only fields set above.
        let rc = unsafe { ibv_modify_qp(self.qp, &mut attr, mask.0 as i32) };
        if rc != 0 {
            return Err(os_fail(reason, what.into(), rc));
        }
        Ok(())
    }
}
