//! The port's datapath: posting receives, sending through kept address
//! handles, polling completions and answering what arrives (the waiting
//! and the [`PeerPort`] the prober drives are `wait`'s).

use super::headers::grh_sender;
use super::*;

impl UdPort {
    pub(super) fn post_recv(&mut self, slot: usize) -> Result<(), Failure> {
        // SAFETY: mr is live (setup created it before any receive).
        let lkey = unsafe { (*self.mr).lkey };
        let mut sge = ibv_sge {
            addr: self.buf.addr(slot * SLOT),
            length: SLOT as u32,
            lkey,
        };
        let mut wr = ibv_recv_wr {
            wr_id: slot as u64,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: qp is live; the SGE lies in the registered buffer and the
        // slot has no other request outstanding (it was just completed).
        let rc = unsafe { ibv_post_recv(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(os_fail(Reason::PostRecv, "ibv_post_recv".into(), rc));
        }
        Ok(())
    }

    /// Sends `payload` to `qpn` through the address handle of `key`
    /// (`ah`); returns the `wr_id` of the send.
    pub(super) fn send(
        &mut self,
        key: AhKey,
        ah: AhPtr,
        qpn: u32,
        payload: &[u8],
    ) -> Result<u64, Failure> {
        let slot = match self.send_busy.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                // Every slot busy: wait (on the channel) for a send
                // completion, for a moment.
                let until = Instant::now() + Duration::from_millis(10);
                loop {
                    self.send_cq.arm();
                    self.reap_sends(None)?;
                    if let Some(s) = self.send_busy.iter().position(Option::is_none) {
                        break s;
                    }
                    if Instant::now() >= until {
                        return Err(Failure::new(
                            Reason::PostSend,
                            "every send slot still in flight".to_string(),
                        ));
                    }
                    self.sleep(until);
                }
            }
        };
        let len = payload.len().min(MAX_PAYLOAD);
        let offset = (RECV_SLOTS + slot) * SLOT;
        self.buf
            .write(offset, payload.get(..len).unwrap_or(payload));
        // SAFETY: mr is live.
        let lkey = unsafe { (*self.mr).lkey };
        let mut sge = ibv_sge {
            addr: self.buf.addr(offset),
            length: len as u32,
            lkey,
        };
        // SAFETY: an all-zero send WR is valid (null pointers, zero unions).
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        self.sends += 1;
        wr.wr_id = SEND_ID + self.sends * SEND_SLOTS as u64 + slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.ud.ah = ah.0;
        wr.wr.ud.remote_qpn = qpn;
        wr.wr.ud.remote_qkey = QKEY;
        let mut bad = ptr::null_mut();
        // SAFETY: qp and ah are live (the cache keeps the handle until the
        // send completes); the SGE lies in the registered buffer in a slot
        // with no request outstanding.
        let rc = unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(os_fail(Reason::PostSend, "ibv_post_send (UD)".into(), rc));
        }
        if let Some(ahs) = self.ahs.as_mut() {
            ahs.hold(&key);
        }
        self.send_busy[slot] = Some(key);
        Ok(wr.wr_id)
    }

    /// The address handle of `key` now, without waiting.
    pub(super) fn handle_for(&mut self, key: &AhKey) -> Lookup<AhPtr> {
        match self.ahs.as_mut() {
            Some(ahs) => ahs.get(key, Instant::now()),
            None => Lookup::Failed(libc::EPIPE),
        }
    }

    /// Frees the slots of completed sends (their address handles stay in
    /// the cache); returns the failure of the send `expect` names, if it
    /// failed.
    pub(super) fn reap_sends(&mut self, expect: Option<&Expect>) -> Result<Option<Event>, Failure> {
        let mut wcs = [Completion::default(); SEND_SLOTS];
        let n = self
            .send_cq
            .poll(&mut wcs)
            .map_err(|e| os_fail(Reason::PollCq, "polling the send CQ".into(), e))?;
        let mut event = None;
        for wc in wcs.iter().take(n) {
            let slot = (wc.wr_id.wrapping_sub(SEND_ID) % SEND_SLOTS as u64) as usize;
            if let Some(key) = self.send_busy.get_mut(slot).and_then(Option::take) {
                if let Some(ahs) = self.ahs.as_mut() {
                    ahs.release(&key);
                }
            }
            if expect.is_none_or(|e| e.wr_id != wc.wr_id) {
                continue;
            }
            if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                event = Some(Event::SendFailed(wc.status, wc.vendor_err));
            } else if let Some(ts) = wc.ts {
                self.sent_ts = Some((wc.wr_id, ts));
            }
        }
        Ok(event)
    }

    /// Polls the CQs once and handles what completed: frees finished
    /// sends, answers probes, sends the answers whose address handle came
    /// in, reposts receives. Returns how many datagrams were received and
    /// what happened to `expect` (the probe in flight), if anything.
    pub(super) fn poll_once(
        &mut self,
        expect: Option<&Expect>,
        responder: &mut Responder,
        served: &mut Served,
    ) -> Result<(usize, Option<Event>), Failure> {
        let mut event = self.reap_sends(expect)?;
        self.send_waiting(served);
        let mut wcs = [Completion::default(); 16];
        let n = self
            .recv_cq
            .poll(&mut wcs)
            .map_err(|e| os_fail(Reason::PollCq, "polling the receive CQ".into(), e))?;
        for wc in wcs.iter().take(n) {
            let slot = wc.wr_id as usize;
            if slot >= RECV_SLOTS {
                continue;
            }
            if wc.status == ibv_wc_status::IBV_WC_SUCCESS {
                if let Some(e) = self.received(slot, wc, expect, responder, served) {
                    event = Some(e);
                }
            }
            // A flushed receive (QP in error) fails to post: reported here.
            self.post_recv(slot)?;
        }
        Ok((n, event))
    }

    /// Handles one received datagram in receive slot `slot`.
    pub(super) fn received(
        &mut self,
        slot: usize,
        wc: &Completion,
        expect: Option<&Expect>,
        responder: &mut Responder,
        served: &mut Served,
    ) -> Option<Event> {
        let at = Instant::now();
        let len = (wc.byte_len as usize).min(SLOT);
        let grh = self.buf.slice(slot * SLOT, GRH_LEN as usize);
        let sender = if wc.grh { grh_sender(grh) } else { None };
        let Some((gid, ipv4)) = sender else {
            served.refuse(DatagramRefusal::Foreign);
            return None;
        };
        let traffic_class = grh_traffic_class(grh, ipv4).unwrap_or(0);
        let payload_len = len.saturating_sub(GRH_LEN as usize);
        let payload = self
            .buf
            .slice(slot * SLOT + GRH_LEN as usize, payload_len)
            .to_vec();
        let d = Datagram {
            payload: &payload,
            gid,
            qpn: wc.src_qp,
            traffic_class,
        };
        match handle(&d, expect.map(|e| &e.flight), responder, at, served) {
            Handled::Reply(m) => Some(Event::Reply(at, m, wc.ts)),
            Handled::Answer(msg, tc) => {
                // An echo is as large as its probe (the reverse path
                // carries the same size); a challenge is the header.
                let size = match msg.kind {
                    MessageKind::Echo => payload.len(),
                    _ => HEADER_LEN,
                };
                let key = AhKey {
                    gid,
                    traffic_class: tc,
                    flow_label: flow_label(
                        u64::from(msg.nonce),
                        u64::from(msg.seq),
                        DEFAULT_FLOW_LABELS,
                    ),
                };
                self.waiting.push_back(WaitingAnswer {
                    key,
                    qpn: wc.src_qp,
                    msg,
                    size,
                    received: at,
                });
                if self.waiting.len() > WAITING_ANSWERS {
                    self.waiting.pop_front();
                    served.refuse(DatagramRefusal::AnswerFailed);
                }
                self.send_waiting(served);
                None
            }
            Handled::Dropped => None,
        }
    }

    /// Sends the waiting answers whose address handle is there, in order;
    /// drops those whose handle failed or that waited too long.
    pub(super) fn send_waiting(&mut self, served: &mut Served) {
        let mut keep = std::collections::VecDeque::new();
        while let Some(w) = self.waiting.pop_front() {
            match self.handle_for(&w.key) {
                Lookup::Ready(ah) => {
                    let mut msg = w.msg;
                    if msg.kind == MessageKind::Echo {
                        msg.hold_ns =
                            u32::try_from(w.received.elapsed().as_nanos()).unwrap_or(u32::MAX);
                    }
                    match self.send(w.key, ah, w.qpn, &msg.encode(w.size)) {
                        Ok(_) if msg.kind == MessageKind::Echo => served.answered += 1,
                        Ok(_) => served.challenged += 1,
                        // A failed answer is the peer's loss to see, not
                        // this port's error.
                        Err(_) => served.refuse(DatagramRefusal::AnswerFailed),
                    }
                }
                Lookup::Waiting if w.received.elapsed() < ANSWER_PATIENCE => keep.push_back(w),
                Lookup::Waiting | Lookup::Failed(_) => served.refuse(DatagramRefusal::AnswerFailed),
            }
        }
        self.waiting = keep;
    }
}

/// The probe in flight: whose answer ends a ping.
pub(super) struct Expect {
    pub(super) flight: InFlight,
    /// The probe's send.
    pub(super) wr_id: u64,
}

pub(super) enum Event {
    /// The answer to the probe in flight (an echo or a challenge), received
    /// at this instant, with its device timestamp where there is one.
    Reply(Instant, Message, Option<u64>),
    SendFailed(u32, u32),
}
