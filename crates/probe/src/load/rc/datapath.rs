//! The data path of an [`RcPort`]: polling and waiting for completions on
//! the completion channel (and the responder's waker), and the
//! [`Connect`], [`Requester`] and [`Receiver`] implementations.

use super::*;

impl RcPort {
    fn lkey(&self) -> u32 {
        if self.mr.is_null() {
            0
        } else {
            // SAFETY: the MR is live.
            unsafe { (*self.mr).lkey }
        }
    }

    /// Polls what the CQ holds now; the count.
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize, Failure> {
        // SAFETY: an all-zero work completion array is valid.
        let mut wcs: [ibv_wc; POLL_BATCH] = unsafe { std::mem::zeroed() };
        let mut total = 0;
        loop {
            // SAFETY: cq is live; wcs has room for POLL_BATCH entries.
            let n = unsafe { ibv_poll_cq(self.cq, POLL_BATCH as i32, wcs.as_mut_ptr()) };
            if n < 0 {
                return Err(os_fail(Reason::PollCq, "ibv_poll_cq".into(), -n));
            }
            let n = n as usize;
            for wc in wcs.iter().take(n) {
                let qp = self
                    .qps
                    .iter()
                    // SAFETY: each QP is live.
                    .position(|q| unsafe { (**q).qp_num } == wc.qp_num)
                    .unwrap_or(0);
                out.push(Completion {
                    wr_id: wc.wr_id,
                    status: wc.status,
                    bytes: wc.byte_len,
                    qp,
                });
            }
            total += n;
            if n < POLL_BATCH {
                return Ok(total);
            }
        }
    }

    /// Completions, or the first event on the channel or the waker, or
    /// `until`.
    fn wait_events(&mut self, until: Instant, out: &mut Vec<Completion>) -> Result<(), Failure> {
        loop {
            if self.poll(out)? > 0 {
                return Ok(());
            }
            if !self.armed {
                // SAFETY: cq is live.
                if unsafe { ibv_req_notify_cq(self.cq, 0) } != 0 {
                    return Err(os_fail(
                        Reason::PollCq,
                        "ibv_req_notify_cq".into(),
                        last_errno(),
                    ));
                }
                self.armed = true;
                // A completion that landed before the arming raises no event.
                if self.poll(out)? > 0 {
                    return Ok(());
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            // SAFETY: the channel is live.
            let cfd = unsafe { (*self.channel).fd };
            let mut fds = [
                libc::pollfd {
                    fd: cfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.wake.as_ref().map_or(-1, |w| w.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // Rounded up: a wait never returns before `until` for nothing.
            let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
            // SAFETY: two valid pollfds (a negative fd is ignored).
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
            if ready < 0 && last_errno() != libc::EINTR {
                return Err(os_fail(Reason::PollCq, "poll".into(), last_errno()));
            }
            if fds[0].revents & libc::POLLIN != 0 {
                let mut cq = ptr::null_mut();
                let mut ctx = ptr::null_mut();
                // SAFETY: non-blocking channel; each event got is acked
                // (ibv_destroy_cq waits for every ack).
                unsafe {
                    while ibv_get_cq_event(self.channel, &mut cq, &mut ctx) == 0 {
                        ibv_ack_cq_events(cq, 1);
                    }
                }
                self.armed = false;
            }
            if fds[1].revents & libc::POLLIN != 0 {
                let mut v = 0u64;
                // SAFETY: an 8-byte read of the eventfd into a u64.
                unsafe { libc::read(fds[1].fd, (&mut v as *mut u64).cast(), 8) };
                return Ok(());
            }
        }
    }
}

impl Connect for RcPort {
    fn local(&self) -> QpSet {
        QpSet {
            gid: self.gid,
            lid: self.lid,
            // SAFETY: each QP is live.
            qpns: self.qps.iter().map(|q| unsafe { (**q).qp_num }).collect(),
            psn: self.psn,
            mtu: mtu_bytes(self.mtu),
        }
    }

    fn window(&self) -> Option<Window> {
        (self.responder && !self.mr.is_null()).then(|| Window {
            // SAFETY: the MR is live.
            rkey: unsafe { (*self.mr).rkey },
            addr: self.buf.addr(),
            len: self.buffer_len,
        })
    }

    fn connect(&mut self, remote: &QpSet, window: Option<Window>) -> Result<(), Failure> {
        if remote.qpns.len() != self.qps.len() {
            return Err(Failure::new(
                Reason::QpRtr,
                format!(
                    "the other side has {} queue pairs, this side {}",
                    remote.qpns.len(),
                    self.qps.len()
                ),
            ));
        }
        for (i, (&qp, &dest)) in self.qps.iter().zip(&remote.qpns).enumerate() {
            self.to_rts(qp, remote, dest)
                .map_err(|e| Failure::new(e.reason, format!("QP {i}: {}", e.message)))?;
        }
        self.remote = window;
        Ok(())
    }

    fn memory(&self) -> MemoryUsed {
        self.memory.clone()
    }
}

impl Requester for RcPort {
    fn qps(&self) -> usize {
        self.qps.len()
    }

    fn post_write(&mut self, qp: usize, len: u32, wr_id: u64) -> Result<(), Failure> {
        let Some(w) = self.remote else {
            return Err(Failure::new(
                Reason::PostSend,
                "not connected to a responder",
            ));
        };
        let Some(&q) = self.qps.get(qp) else {
            return Err(Failure::new(Reason::PostSend, format!("no QP {qp}")));
        };
        if u64::from(len) > w.len.min(self.buffer_len) {
            return Err(Failure::new(
                Reason::PostSend,
                format!("a {len}-byte write is larger than the buffers"),
            ));
        }
        let mut sge = ibv_sge {
            addr: self.buf.addr(),
            length: len,
            lkey: self.lkey(),
        };
        // SAFETY: an all-zero send WR is valid; the fields used are set.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.imm_data_invalidated_rkey_union.imm_data = 0;
        wr.wr.rdma.remote_addr = w.addr;
        wr.wr.rdma.rkey = w.rkey;
        let mut bad = ptr::null_mut();
        // SAFETY: qp is live; the SGE lies in the registered buffer and the
        // remote range in the responder's window (checked above).
        let rc = unsafe { ibv_post_send(q, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(os_fail(Reason::PostSend, "ibv_post_send".into(), rc));
        }
        Ok(())
    }

    fn wait(&mut self, until: Instant, out: &mut Vec<Completion>) -> Result<(), Failure> {
        self.wait_events(until, out)
    }
}

impl Receiver for RcPort {
    fn qps(&self) -> usize {
        self.qps.len()
    }

    fn post_receives(&mut self, qp: usize, n: u32) -> Result<(), Failure> {
        let Some(&q) = self.qps.get(qp) else {
            return Err(Failure::new(Reason::PostRecv, format!("no QP {qp}")));
        };
        for _ in 0..n {
            // A write with immediate writes no byte into the receive: no SGE.
            let mut wr = ibv_recv_wr {
                wr_id: qp as u64,
                next: ptr::null_mut(),
                sg_list: ptr::null_mut(),
                num_sge: 0,
            };
            let mut bad = ptr::null_mut();
            // SAFETY: qp is live; the WR has no scatter list.
            let rc = unsafe { ibv_post_recv(q, &mut wr, &mut bad) };
            if rc != 0 {
                return Err(os_fail(Reason::PostRecv, "ibv_post_recv".into(), rc));
            }
        }
        Ok(())
    }

    fn wait(&mut self, until: Instant, out: &mut Vec<Completion>) -> Result<(), Failure> {
        self.wait_events(until, out)
    }

    fn halt(&mut self) {
        for &qp in &self.qps {
            // SAFETY: an all-zero attribute with the state set is valid.
            let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = ibv_qp_state::IBV_QPS_ERR;
            // SAFETY: qp is live.
            unsafe { ibv_modify_qp(qp, &mut a, ibv_qp_attr_mask::IBV_QP_STATE.0 as i32) };
        }
    }

    fn waker(&self) -> Waker {
        match &self.wake {
            Some(fd) => {
                let fd = fd.clone();
                Waker::new(move || {
                    let one = 1u64;
                    // SAFETY: an 8-byte write to the eventfd, kept open by
                    // the Arc as long as the waker lives.
                    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
                })
            }
            None => Waker::new(|| {}),
        }
    }
}
